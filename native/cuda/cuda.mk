# FakeGPU's CUDA libraries (native/cuda/README section in native/README.md), included by native/Makefile.
#
# Each library: sources, SONAME, symbol version node (the one CUDA-built PyTorch's imports name), and for the
# libraries we compile against NVIDIA's header, that header and its status type. tools/gen_cuda_stubs.py makes
# the not-supported stubs and the version script from the header (or from the import list) and our api table.
# NVIDIA's headers come from the torch install or PyPI at build time (tools/cuda_headers.py), never the repo.

# Two sets of the per-CUDA-major libraries are built from the same sources: against CUDA 13's headers
# (libcudart.so.13, ...; variables without suffix: CU_GEN, CU_OBJ, CU_FLAGS) and against CUDA 12.8's
# (libcudart.so.12, ...; suffix 12: CU12_GEN, CU12_OBJ, CU12_FLAGS). Their sonames differ, so both sit in
# build/lib and a program binds to the set it was linked against. Libraries whose soname is the same in both
# CUDA majors (libcuda.so.1, libnccl.so.2, libcudnn.so.9, libcusparse.so.12, ...) are built once, against 13.
CU       := cuda
CU_GEN   := $(B)/gen/cuda
CU_OBJ   := $(OBJ)/cuda
CU_LIB   := $(B)/lib
CU_FLAGS := $(B)/cuda-include/flags
CU_IMPORTS := $(CU)/imports
CU_CFLAGS = $(filter-out -Invml -I$(B)/include -I$(GEN),$(CFLAGS)) -I$(CU)/common -I$(CU)/driver -I$(CU)/runtime \
            -I$(CU)/blas -I$(CU_GEN) $(shell cat $(CU_FLAGS) 2>/dev/null)
CU12_GEN   := $(B)/gen/cuda12
CU12_OBJ   := $(OBJ)/cuda12
CU12_FLAGS := $(B)/cuda12-include/flags
CU12_IMPORTS := $(CU)/imports/cu12
# CUDA 12's cublas_api.h wants CUBLASAPI defined by an includer (cublas_v2.h or cublasLt.h): empty, as for host C.
CU12_DEFS  := -DCUBLASAPI=
CU12_CFLAGS = $(filter-out -Invml -I$(B)/include -I$(GEN),$(CFLAGS)) -I$(CU)/common -I$(CU)/runtime -I$(CU)/blas \
              -I$(CU_GEN) $(CU12_DEFS) $(shell cat $(CU12_FLAGS) 2>/dev/null)
CU_GENPY := $(ROOT)/tools/gen_cuda_stubs.py
CU_COMMON_OBJ := $(COMMON_OBJ) $(CU_OBJ)/common/fgc_unsup.o $(CU_OBJ)/common/fgc_env.o $(CU_OBJ)/common/fgc_image.o \
                 $(CU_OBJ)/common/fgc_private.o \
                 $(CU_OBJ)/common/fgc_report.o

$(CU_FLAGS):
	@mkdir -p $(dir $@)
	$(PYTHON) $(ROOT)/tools/cuda_headers.py --dest $(B)/cuda-include

$(CU12_FLAGS):
	@mkdir -p $(dir $@)
	$(PYTHON) $(ROOT)/tools/cuda_headers.py --cuda 12 --dest $(B)/cuda12-include

# cuGetProcAddress answers a caller built with CUDA 12 (cudaVersion < 13000) from CUDA 12's renames.
$(CU_GEN)/cuda12_aliases.h: $(CU12_FLAGS) $(CU_GENPY)
	@mkdir -p $(dir $@)
	$(PYTHON) $(CU_GENPY) --aliases-from $(B)/cuda12-include/runtime-include/cuda.h --aliases-only $@ --out-dir $(CU_GEN)

# The shared state's and the fault board's layouts (common/fg_state.h, common/fg_faults.h) come from the generated
# contract; -I$(GEN) goes last so the CUDA stubs' own generated headers keep precedence over NVML's.
# (libnccl's coll.c only reads the board's constants: the driver answers its questions.)
CU_CONTRACT_OBJ := $(addprefix $(CU_OBJ)/,driver/state.o driver/init.o driver/memory.o driver/private.o nccl/coll.o)
$(CU_CONTRACT_OBJ): CU_CFLAGS += -I$(GEN)
$(CU_CONTRACT_OBJ): | $(GEN)/fg_contract.h

$(CU_OBJ)/%.o: $(CU)/%.c $(CU_FLAGS) | $(CU_GEN)/cuda_aliases.h $(CU_GEN)/cuda12_aliases.h
	@mkdir -p $(dir $@)
	$(CC) $(CU_CFLAGS) -c $< -o $@

$(CU12_OBJ)/%.o: $(CU)/%.c $(CU12_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CU12_CFLAGS) -c $< -o $@

$(CU_OBJ)/gen/%.o: $(CU_GEN)/%.c $(CU_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CU_CFLAGS) -c $< -o $@

$(CU12_OBJ)/gen/%.o: $(CU12_GEN)/%.c $(CU12_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CU12_CFLAGS) -c $< -o $@

# Preprocessed headers, to read prototypes from.
$(CU_GEN)/%.i: $(CU_FLAGS)
	@mkdir -p $(dir $@)
	echo '#include <$*.h>' | $(CC) -E -P -x c $(shell cat $(CU_FLAGS) 2>/dev/null) - -o $@

$(CU12_GEN)/%.i: $(CU12_FLAGS)
	@mkdir -p $(dir $@)
	echo '#include <$*.h>' | $(CC) -E -P -x c $(CU12_DEFS) $(shell cat $(CU12_FLAGS) 2>/dev/null) - -o $@

# $(1) lib  $(2) header basename or empty  $(3) status type  $(4) not-supported  $(5) name regex  $(6) node
# $(7) set suffix: empty for the CUDA 13 set, 12 for the CUDA 12 set  $(8) more generator options
define CU_STUBS
$(CU$(7)_GEN)/$(1)_stubs.c $(CU$(7)_GEN)/$(1).map $(CU$(7)_GEN)/$(1)_capabilities.tsv $(if $(filter cuda,$(1)),$(CU_GEN)/cuda_aliases.h) &: $(if $(2),$(CU$(7)_GEN)/$(2).i) $(CU)/api/$(1).tsv $(CU$(7)_IMPORTS)/$(1).txt $(CU_GENPY) $(CU$(7)_FLAGS)
	$(PYTHON) $(CU_GENPY) --lib $(1) --table $(CU)/api/$(1).tsv --imports $(CU$(7)_IMPORTS)/$(1).txt \
	  $(if $(2),--header $(CU$(7)_GEN)/$(2).i --ret-type '$(3)' --include '<$(2).h>' --name-regex '$(5)') \
	  $(if $(filter cuda,$(1)),--aliases-from $$(firstword $$(patsubst -I%,%,$$(filter %/cu13/include %/cuda-include,$$(shell cat $(CU_FLAGS)))))/cuda.h) \
	  --not-supported '$(4)' $(if $(6),--version-node $(6)) $(8) --out-dir $(CU$(7)_GEN)
	@touch $(CU$(7)_GEN)/$(1)_stubs.c $(CU$(7)_GEN)/$(1).map $(CU$(7)_GEN)/$(1)_capabilities.tsv $(if $(filter cuda,$(1)),$(CU_GEN)/cuda_aliases.h)
endef

# $(1) lib  $(2) soname  $(3) objects  $(4) extra link flags  $(5) prerequisites  $(6) set suffix (as CU_STUBS)
define CU_LINK
$(CU_LIB)/$(2): $(3) $(CU$(6)_OBJ)/gen/$(1)_stubs.o $(CU_COMMON_OBJ) $(CU$(6)_GEN)/$(1).map $(5)
	@mkdir -p $$(dir $$@)
	$(CC) -shared -Wl,-soname,$(2) -Wl,--version-script=$(CU$(6)_GEN)/$(1).map -Wl,--no-undefined-version \
	  -Wl,-z,defs -Wl,--disable-new-dtags -Wl,-rpath,'$$$$ORIGIN' -o $$@ $(3) $(CU$(6)_OBJ)/gen/$(1)_stubs.o \
	  $(CU_COMMON_OBJ) -L$(CU_LIB) $(4) $(if $(filter cuda,$(1)),,-Wl,--no-as-needed -l:libcuda.so.1) $(LDLIBS)
CU_ALL += $(CU_LIB)/$(2)
endef

CU_DRIVER_OBJ  := $(patsubst $(CU)/%.c,$(CU_OBJ)/%.o,$(wildcard $(CU)/driver/*.c))
CU_NCCL_OBJ    := $(patsubst $(CU)/%.c,$(CU_OBJ)/%.o,$(wildcard $(CU)/nccl/*.c))
CU_EXTRA_OBJ   := $(CU_OBJ)/stubs/extra.o
# CUPTI's activity API (cupti/): compiled once, against CUPTI 13's cupti.h from the torch install's headers, and
# linked into both sets: the records it writes are the newest versions, whose leading fields CUDA 12's are.
CU_CUPTI_OBJ   := $(patsubst $(CU)/%.c,$(CU_OBJ)/%.o,$(wildcard $(CU)/cupti/*.c))

# ---- the libraries whose soname carries the CUDA major: one set per major ----
# $(1) set suffix (empty: CUDA 13, 12: CUDA 12)  $(2) CUDA major  $(3) soname major of cuSOLVER and cuFFT
define CU_MAJOR_SET
CU$(1)_RUNTIME_OBJ := $(patsubst $(CU)/%.c,$(CU$(1)_OBJ)/%.o,$(wildcard $(CU)/runtime/*.c))
CU$(1)_BLAS_OBJ    := $(CU$(1)_OBJ)/blas/cublas.o $(CU$(1)_OBJ)/blas/gemm.o $(CU$(1)_OBJ)/blas/level2.o \
                      $(CU$(1)_OBJ)/blas/solve.o \
                      $(CU$(1)_OBJ)/blas/status.o $(CU$(1)_OBJ)/blas/record.o
CU$(1)_LT_OBJ      := $(CU$(1)_OBJ)/blas/lt.o $(CU$(1)_OBJ)/blas/status.o $(CU$(1)_OBJ)/blas/record_lt.o

# The GEMM account names its library in the report file.
$(CU$(1)_OBJ)/blas/record.o: $(CU)/blas/record.c $(CU$(1)_FLAGS)
	@mkdir -p $$(dir $$@)
	$(CC) $$(CU$(1)_CFLAGS) -DFGBLAS_LIB='"cublas"' -c $$< -o $$@
$(CU$(1)_OBJ)/blas/record_lt.o: $(CU)/blas/record.c $(CU$(1)_FLAGS)
	@mkdir -p $$(dir $$@)
	$(CC) $$(CU$(1)_CFLAGS) -DFGBLAS_LIB='"cublasLt"' -c $$< -o $$@

$(call CU_STUBS,cudart,cuda_runtime_api,cudaError_t,cudaErrorNotSupported,^cuda[A-Z],libcudart.so.$(2),$(1),--per-major)
$(call CU_STUBS,cublas,cublas_api,cublasStatus_t,CUBLAS_STATUS_NOT_SUPPORTED,^cublas(?!Lt),libcublas.so.$(2),$(1),--per-major)
$(call CU_STUBS,cublasLt,cublasLt,cublasStatus_t,CUBLAS_STATUS_NOT_SUPPORTED,^cublasLt,libcublasLt.so.$(2),$(1),--per-major)
$(call CU_STUBS,cusolver,,,9,,libcusolver.so.$(3),$(1))
$(call CU_STUBS,cufft,,,16,,libcufft.so.$(3),$(1))
$(call CU_STUBS,nvrtc,,,11,,libnvrtc.so.$(2),$(1))
$(call CU_STUBS,cupti,,,27,,libcupti.so.$(2),$(1))

$(call CU_LINK,cudart,libcudart.so.$(2),$$(CU$(1)_RUNTIME_OBJ),-l:libcuda.so.1,$(CU_LIB)/libcuda.so.1,$(1))
$(call CU_LINK,cublasLt,libcublasLt.so.$(2),$$(CU$(1)_LT_OBJ),,$(CU_LIB)/libcuda.so.1,$(1))
$(call CU_LINK,cublas,libcublas.so.$(2),$$(CU$(1)_BLAS_OBJ),-l:libcudart.so.$(2) -l:libcublasLt.so.$(2),$(CU_LIB)/libcudart.so.$(2) $(CU_LIB)/libcublasLt.so.$(2),$(1))
$(call CU_LINK,cusolver,libcusolver.so.$(3),,,$(CU_LIB)/libcuda.so.1,$(1))
$(call CU_LINK,cufft,libcufft.so.$(3),,,$(CU_LIB)/libcuda.so.1,$(1))
$(call CU_LINK,nvrtc,libnvrtc.so.$(2),$(CU_EXTRA_OBJ),,$(CU_LIB)/libcuda.so.1,$(1))
$(call CU_LINK,cupti,libcupti.so.$(2),$(CU_CUPTI_OBJ),,$(CU_LIB)/libcuda.so.1,$(1))
endef

$(eval $(call CU_MAJOR_SET,,13,12))
$(eval $(call CU_MAJOR_SET,12,12,11))

$(eval $(call CU_STUBS,cuda,cuda,CUresult,CUDA_ERROR_NOT_SUPPORTED,^cu[A-Z],))
$(eval $(call CU_STUBS,nccl,nccl,ncclResult_t,ncclInvalidUsage,^nccl,))
# Libraries PyTorch needs at load time and only calls for features FakeGPU does not provide: stubs from the
# import lists, each returning the library's documented not-supported status.
$(eval $(call CU_STUBS,cusparse,,,10,,libcusparse.so.12))
$(eval $(call CU_STUBS,cufile,,,5001,,))
$(eval $(call CU_STUBS,cusparseLt,,,10,,))
$(eval $(call CU_STUBS,nvshmem_host,,,0,,NVSHMEM))
$(eval $(call CU_STUBS,curand,,,203,,libcurand.so.10))

# Every library but libcuda links libcuda (DT_NEEDED), so libcuda is finalized last and merges the process report.
$(eval $(call CU_LINK,cuda,libcuda.so.1,$(CU_DRIVER_OBJ),,))
# NCCL uses the driver API only, so one libnccl.so.2 serves either runtime.
$(eval $(call CU_LINK,nccl,libnccl.so.2,$(CU_NCCL_OBJ),,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cusparse,libcusparse.so.12,$(CU_EXTRA_OBJ),,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cufile,libcufile.so.0,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cusparseLt,libcusparseLt.so.0,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,nvshmem_host,libnvshmem_host.so.3,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,curand,libcurand.so.10,,,$(CU_LIB)/libcuda.so.1))


# ---- cuDNN (native/cuda/dnn/): compiled against NVIDIA's cudnn.h from the nvidia-cudnn wheel torch depends on
# (found on the build Python's path, never committed); the header's other functions are generated stubs. It
# records its executions as kernel launches through libcudart, hence the runtime as DT_NEEDED.
CU_DNN_FLAGS := $(B)/cuda-include/cudnn-flags
CU_DNN_OBJ   := $(patsubst $(CU)/%.c,$(CU_OBJ)/%.o,$(wildcard $(CU)/dnn/*.c))
$(CU_DNN_FLAGS):
	@mkdir -p $(dir $@)
	$(PYTHON) -c 'import pathlib, sys; d = [pathlib.Path(p, "nvidia/cudnn/include") for p in sys.path]; d = [x for x in d if (x / "cudnn.h").is_file()]; print("-I%s" % d[0]) if d else sys.exit("cudnn.h not found: install torch, which depends on nvidia-cudnn-cu13")' > $@.tmp
	mv $@.tmp $@
$(CU_DNN_OBJ) $(CU_OBJ)/gen/cudnn_stubs.o: $(CU_DNN_FLAGS)
$(CU_DNN_OBJ) $(CU_OBJ)/gen/cudnn_stubs.o: CU_CFLAGS += -I$(CU)/dnn $(shell cat $(CU_DNN_FLAGS) 2>/dev/null)
$(CU_GEN)/cudnn.i: $(CU_FLAGS) $(CU_DNN_FLAGS)
	@mkdir -p $(dir $@)
	echo '#include <cudnn.h>' | $(CC) -E -P -x c $(shell cat $(CU_FLAGS) $(CU_DNN_FLAGS) 2>/dev/null) - -o $@
$(eval $(call CU_STUBS,cudnn,cudnn,cudnnStatus_t,CUDNN_STATUS_NOT_SUPPORTED,^cudnn,libcudnn.so.9))
$(eval $(call CU_LINK,cudnn,libcudnn.so.9,$(CU_DNN_OBJ),-l:libcudart.so.13,$(CU_LIB)/libcudart.so.13))

# In-process cost of cudaMalloc/cudaFree pairs and of a launch, for bench/bench_cuda.py.
$(B)/bin/cuda-bench: $(CU_OBJ)/bench/cuda_bench.o $(CU_OBJ)/common/fgc_image.o $(CU_LIB)/libcudart.so.13
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(CU_OBJ)/common/fgc_image.o -L$(CU_LIB) -l:libcudart.so.13 -Wl,--disable-new-dtags \
	  -Wl,-rpath,'$$ORIGIN/../lib' $(LDLIBS)
CU_ALL += $(B)/bin/cuda-bench

cuda: $(CU_ALL)
