/* Internals of FakeGPU's libcudnn.so.9. cuDNN's public API is implemented over FakeGPU's runtime: handles carry
 * a device and a stream, descriptors (legacy and backend) keep what the program sets and answer queries from it,
 * and an execution is validated against the program's device allocations and recorded as one kernel launch in
 * libcudart's account (named "cudnn:<op kinds>"). Nothing is computed: in native mode kernels do not run. */
#ifndef FGDNN_H
#define FGDNN_H

#include <pthread.h>
#include <stdint.h>

#pragma GCC visibility push(default)
#include <cuda_runtime_api.h>
#include <cudnn.h>
#pragma GCC visibility pop

#include "fg_log.h"
#include "fgc_unsup.h"

/* Live objects carry a tag so that a stale or foreign pointer is refused instead of read. */
#define FGDNN_HANDLE_MAGIC 0x66676468u /* "fgdh" */
#define FGDNN_DESC_MAGIC 0x66676464u   /* "fgdd" */

struct cudnnContext {
    uint32_t magic;
    int device;
    _Atomic(cudaStream_t) stream; /* torch sets the current stream from whichever thread runs the op */
};

/* ---- backend descriptors: a typed attribute store ---- */

typedef struct fgdnn_attr {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t count;
    void *data; /* count elements; for CUDNN_TYPE_BACKEND_DESCRIPTOR, owned snapshots (fgdnn_desc *) */
} fgdnn_attr;

typedef struct fgdnn_desc {
    uint32_t magic;
    cudnnBackendDescriptorType_t type;
    int finalized;
    pthread_mutex_t lock;
    fgdnn_attr *attrs;
    size_t nattrs, cap;
} fgdnn_desc;

/* Status and the thread's last error message (cudnnGetLastErrorString), in one place. */
FG_HIDDEN cudnnStatus_t fgdnn_fail(cudnnStatus_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

FG_HIDDEN int fgdnn_handle_ok(cudnnHandle_t h);
FG_HIDDEN fgdnn_desc *fgdnn_desc_of(cudnnBackendDescriptor_t d); /* NULL unless a live backend descriptor */

/* Attribute access for the finalize/execute logic (caller holds no lock; snapshots are immutable once taken). */
FG_HIDDEN const fgdnn_attr *fgdnn_find(const fgdnn_desc *d, cudnnBackendAttributeName_t name);
FG_HIDDEN int fgdnn_get_i64(const fgdnn_desc *d, cudnnBackendAttributeName_t name, int64_t *out);
FG_HIDDEN fgdnn_desc *fgdnn_get_desc(const fgdnn_desc *d, cudnnBackendAttributeName_t name);
/* Store (replacing) an attribute the library itself derives: read-only ones such as workspace sizes. */
FG_HIDDEN cudnnStatus_t fgdnn_put(fgdnn_desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                  int64_t count, const void *elems);
FG_HIDDEN fgdnn_desc *fgdnn_desc_new(cudnnBackendDescriptorType_t type);
FG_HIDDEN void fgdnn_desc_free(fgdnn_desc *d);

/* Per-type finalize rules (graph.c) and whether an attribute is the library's to set (get-only). */
FG_HIDDEN cudnnStatus_t fgdnn_finalize(fgdnn_desc *d);
FG_HIDDEN int fgdnn_read_only(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t name);
FG_HIDDEN int fgdnn_attr_belongs(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t name);
/* The kernel-name word of an operation descriptor type ("ConvolutionFwd"), NULL for non-operations. */
FG_HIDDEN const char *fgdnn_op_kind(cudnnBackendDescriptorType_t type);

/* Bytes of one element of a cuDNN data type; 0 if unknown. */
FG_HIDDEN size_t fgdnn_dtype_size(cudnnDataType_t t);

/* ---- execution: pointer checks and the launch record (record.c) ---- */

/* CUDNN_STATUS_SUCCESS when `p` lies in a device allocation of `device` (and `bytes` from it fit in it). */
FG_HIDDEN cudnnStatus_t fgdnn_check_device_ptr(const void *p, int device, size_t bytes, const char *what);
/* Count one launch of the kernel named `name` ("cudnn:...") on `stream`, sized for `elements` outputs, that wrote
 * the device buffers outs[0..nouts) (at most FGDNN_MAX_OUTPUTS; more are not marked). */
#define FGDNN_MAX_OUTPUTS 16
FG_HIDDEN cudnnStatus_t fgdnn_launch(const char *name, cudaStream_t stream, unsigned long long elements,
                                     const void *const *outs, size_t nouts);

/* ---- legacy descriptors (legacy.c) ---- */

#define FGDNN_MAX_DIMS 8 /* CUDNN_DIM_MAX */

struct cudnnTensorStruct {
    uint32_t magic;
    int set;
    cudnnDataType_t dtype;
    int nbdims;
    int dims[FGDNN_MAX_DIMS], strides[FGDNN_MAX_DIMS];
};

FG_HIDDEN int fgdnn_tensor_ok(const struct cudnnTensorStruct *t); /* created and set */
/* Elements covered (the span from the first to the last element, by strides), and the element count. */
FG_HIDDEN size_t fgdnn_tensor_span_bytes(const struct cudnnTensorStruct *t);
FG_HIDDEN unsigned long long fgdnn_tensor_elements(const struct cudnnTensorStruct *t);

#endif
