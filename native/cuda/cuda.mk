# FakeGPU's CUDA libraries (native/cuda/README section in native/README.md), included by native/Makefile.
#
# Each library: sources, SONAME, symbol version node (the one CUDA-built PyTorch's imports name), and for the
# libraries we compile against NVIDIA's header, that header and its status type. tools/gen_cuda_stubs.py makes
# the not-supported stubs and the version script from the header (or from the import list) and our api table.
# NVIDIA's headers come from the torch install or PyPI at build time (tools/cuda_headers.py), never the repo.

CU       := cuda
CU_GEN   := $(B)/gen/cuda
CU_OBJ   := $(OBJ)/cuda
CU_LIB   := $(B)/lib
CU_FLAGS := $(B)/cuda-include/flags
CU_CFLAGS = $(filter-out -Invml -I$(B)/include -I$(GEN),$(CFLAGS)) -I$(CU)/common -I$(CU)/driver -I$(CU)/runtime \
            -I$(CU)/blas -I$(CU_GEN) $(shell cat $(CU_FLAGS) 2>/dev/null)
CU_GENPY := $(ROOT)/tools/gen_cuda_stubs.py
CU_COMMON_OBJ := $(COMMON_OBJ) $(CU_OBJ)/common/fgc_unsup.o $(CU_OBJ)/common/fgc_env.o \
                 $(CU_OBJ)/common/fgc_report.o

$(CU_FLAGS):
	@mkdir -p $(dir $@)
	$(PYTHON) $(ROOT)/tools/cuda_headers.py --dest $(B)/cuda-include

$(CU_OBJ)/%.o: $(CU)/%.c $(CU_FLAGS) | $(CU_GEN)/cuda_aliases.h
	@mkdir -p $(dir $@)
	$(CC) $(CU_CFLAGS) -c $< -o $@

$(CU_OBJ)/gen/%.o: $(CU_GEN)/%.c $(CU_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CU_CFLAGS) -c $< -o $@

# Preprocessed headers, to read prototypes from.
$(CU_GEN)/%.i: $(CU_FLAGS)
	@mkdir -p $(dir $@)
	echo '#include <$*.h>' | $(CC) -E -P -x c $(shell cat $(CU_FLAGS) 2>/dev/null) - -o $@

# $(1) lib  $(2) header basename or empty  $(3) status type  $(4) not-supported  $(5) name regex  $(6) node
define CU_STUBS
$(CU_GEN)/$(1)_stubs.c $(CU_GEN)/$(1).map $(CU_GEN)/$(1)_capabilities.tsv $(if $(filter cuda,$(1)),$(CU_GEN)/cuda_aliases.h) &: $(if $(2),$(CU_GEN)/$(2).i) $(CU)/api/$(1).tsv $(CU)/imports/$(1).txt $(CU_GENPY) $(CU_FLAGS)
	$(PYTHON) $(CU_GENPY) --lib $(1) --table $(CU)/api/$(1).tsv --imports $(CU)/imports/$(1).txt \
	  $(if $(2),--header $(CU_GEN)/$(2).i --ret-type '$(3)' --include '<$(2).h>' --name-regex '$(5)') \
	  $(if $(filter cuda,$(1)),--aliases-from $$(firstword $$(patsubst -I%,%,$$(filter %/cu13/include %/cuda-include,$$(shell cat $(CU_FLAGS)))))/cuda.h) \
	  --not-supported '$(4)' $(if $(6),--version-node $(6)) --out-dir $(CU_GEN)
	@touch $(CU_GEN)/$(1)_stubs.c $(CU_GEN)/$(1).map $(CU_GEN)/$(1)_capabilities.tsv $(if $(filter cuda,$(1)),$(CU_GEN)/cuda_aliases.h)
endef

# $(1) lib  $(2) soname  $(3) objects  $(4) extra link flags
define CU_LINK
$(CU_LIB)/$(2): $(3) $(CU_OBJ)/gen/$(1)_stubs.o $(CU_COMMON_OBJ) $(CU_GEN)/$(1).map $(5)
	@mkdir -p $$(dir $$@)
	$(CC) -shared -Wl,-soname,$(2) -Wl,--version-script=$(CU_GEN)/$(1).map -Wl,--no-undefined-version \
	  -Wl,-z,defs -Wl,--disable-new-dtags -Wl,-rpath,'$$$$ORIGIN' -o $$@ $(3) $(CU_OBJ)/gen/$(1)_stubs.o \
	  $(CU_COMMON_OBJ) -L$(CU_LIB) $(4) $(if $(filter cuda,$(1)),,-Wl,--no-as-needed -l:libcuda.so.1) $(LDLIBS)
CU_ALL += $(CU_LIB)/$(2)
endef

CU_DRIVER_OBJ  := $(patsubst $(CU)/%.c,$(CU_OBJ)/%.o,$(wildcard $(CU)/driver/*.c))
CU_RUNTIME_OBJ := $(patsubst $(CU)/%.c,$(CU_OBJ)/%.o,$(wildcard $(CU)/runtime/*.c))
CU_BLAS_OBJ    := $(CU_OBJ)/blas/cublas.o $(CU_OBJ)/blas/gemm.o $(CU_OBJ)/blas/status.o $(CU_OBJ)/blas/record.o
CU_LT_OBJ      := $(CU_OBJ)/blas/lt.o $(CU_OBJ)/blas/status.o $(CU_OBJ)/blas/record_lt.o
CU_NCCL_OBJ    := $(patsubst $(CU)/%.c,$(CU_OBJ)/%.o,$(wildcard $(CU)/nccl/*.c))
CU_EXTRA_OBJ   := $(CU_OBJ)/stubs/extra.o

# The GEMM account names its library in the report file.
$(CU_OBJ)/blas/record.o: $(CU)/blas/record.c $(CU_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CU_CFLAGS) -DFGBLAS_LIB='"cublas"' -c $< -o $@
$(CU_OBJ)/blas/record_lt.o: $(CU)/blas/record.c $(CU_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CU_CFLAGS) -DFGBLAS_LIB='"cublasLt"' -c $< -o $@

$(eval $(call CU_STUBS,cuda,cuda,CUresult,CUDA_ERROR_NOT_SUPPORTED,^cu[A-Z],))
$(eval $(call CU_STUBS,cudart,cuda_runtime_api,cudaError_t,cudaErrorNotSupported,^cuda[A-Z],libcudart.so.13))
$(eval $(call CU_STUBS,cublas,cublas_api,cublasStatus_t,CUBLAS_STATUS_NOT_SUPPORTED,^cublas(?!Lt),libcublas.so.13))
$(eval $(call CU_STUBS,cublasLt,cublasLt,cublasStatus_t,CUBLAS_STATUS_NOT_SUPPORTED,^cublasLt,libcublasLt.so.13))
$(eval $(call CU_STUBS,nccl,nccl,ncclResult_t,ncclInvalidUsage,^nccl,))
# Libraries PyTorch needs at load time and only calls for features FakeGPU does not provide: stubs from the
# import lists, each returning the library's documented not-supported status.
$(eval $(call CU_STUBS,cudnn,,,3000,,libcudnn.so.9))
$(eval $(call CU_STUBS,cusparse,,,10,,libcusparse.so.12))
$(eval $(call CU_STUBS,cusolver,,,9,,libcusolver.so.12))
$(eval $(call CU_STUBS,cufft,,,16,,libcufft.so.12))
$(eval $(call CU_STUBS,cufile,,,5001,,))
$(eval $(call CU_STUBS,cusparseLt,,,10,,))
$(eval $(call CU_STUBS,nvrtc,,,11,,libnvrtc.so.13))
$(eval $(call CU_STUBS,nvshmem_host,,,0,,NVSHMEM))
$(eval $(call CU_STUBS,cupti,,,27,,libcupti.so.13))

# Every library but libcuda links libcuda (DT_NEEDED), so libcuda is finalized last and merges the process report.
$(eval $(call CU_LINK,cuda,libcuda.so.1,$(CU_DRIVER_OBJ),,))
$(eval $(call CU_LINK,cudart,libcudart.so.13,$(CU_RUNTIME_OBJ),-l:libcuda.so.1,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cublasLt,libcublasLt.so.13,$(CU_LT_OBJ),,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cublas,libcublas.so.13,$(CU_BLAS_OBJ),-l:libcudart.so.13 -l:libcublasLt.so.13,$(CU_LIB)/libcudart.so.13 $(CU_LIB)/libcublasLt.so.13))
$(eval $(call CU_LINK,nccl,libnccl.so.2,$(CU_NCCL_OBJ),-l:libcudart.so.13,$(CU_LIB)/libcudart.so.13))
$(eval $(call CU_LINK,cudnn,libcudnn.so.9,$(CU_EXTRA_OBJ),,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cusparse,libcusparse.so.12,$(CU_EXTRA_OBJ),,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cusolver,libcusolver.so.12,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cufft,libcufft.so.12,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cufile,libcufile.so.0,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cusparseLt,libcusparseLt.so.0,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,nvrtc,libnvrtc.so.13,$(CU_EXTRA_OBJ),,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,nvshmem_host,libnvshmem_host.so.3,,,$(CU_LIB)/libcuda.so.1))
$(eval $(call CU_LINK,cupti,libcupti.so.13,,,$(CU_LIB)/libcuda.so.1))


# In-process cost of cudaMalloc/cudaFree pairs, for bench/bench_cuda.py.
$(B)/bin/cuda-bench: $(CU_OBJ)/bench/cuda_bench.o $(CU_LIB)/libcudart.so.13
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< -L$(CU_LIB) -l:libcudart.so.13 -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN/../lib' $(LDLIBS)
CU_ALL += $(B)/bin/cuda-bench

cuda: $(CU_ALL)
