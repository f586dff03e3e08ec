/* Module images of stand-in kernels: how FakeGPU's cuBLAS and cuDNN tell the driver that a routine wrote its
 * outputs. On a GPU those libraries launch kernels of their own, whose arguments include the outputs; here each
 * routine is a kernel of a module the library builds (an ELF cubin in a fat binary, as nvcc lays them out, holding
 * only the kernels' parameter information) and launches through the public driver or runtime API, so the driver
 * marks the memory the arguments point at as kernel-written, as it does for every other launch. */
#ifndef FGC_IMAGE_H
#define FGC_IMAGE_H

#include <stddef.h>

#include "fg_log.h"

/* A fat binary wrapper (what nvcc-generated code passes to __cudaRegisterFatBinary, and what cuModuleLoadData
 * accepts) for one kernel `name` taking `npointers` 8-byte parameters. Allocated once, never freed (a registered
 * or loaded image must outlive its module); NULL when out of memory. */
FG_HIDDEN void *fgc_image_new(const char *name, unsigned npointers);

/* FakeGPU's cuBLAS launches its stand-in with one block per this many FLOPs of the GEMM (2 x 128 x 128 x 32: a
 * 128 x 128 output tile over 32 of k), so the driver knows how long the GEMM would keep a GPU busy. */
#define FGC_STANDIN_BLOCK_FLOPS (1ULL << 20)

/* Is `name` a stand-in for tensor-core math (what a GPU's power and heat follow most): a cuBLAS routine (blas/record.c
 * names its kernels "cublas..."), or a cuDNN graph with a convolution, matmul or attention ("cudnn:" and the graph's
 * operations, dnn/execute.c)? Other stand-ins (normalizations, pointwise graphs) and programs' own kernels are not. */
FG_HIDDEN int fgc_standin_compute(const char *name);

#endif
