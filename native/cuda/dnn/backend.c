/* cuDNN's backend API (cudnn_graph.h): descriptors are typed attribute stores. Set copies the elements in (a
 * descriptor-valued attribute takes a snapshot of the finalized descriptors it names, so the program may destroy
 * its own afterwards, as cudnn-frontend does with the tensors of an operation it has built); Finalize applies
 * the type's rules (graph.c) and adds what the library derives; Get answers with what was stored. A
 * descriptor-valued Get fills descriptors the caller created, as the API specifies. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgdnn.h"

static size_t elem_size(cudnnBackendAttributeType_t t)
{
    switch (t) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
        return sizeof(void *);
    case CUDNN_TYPE_BOOLEAN:
        return sizeof(bool);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
        return 8;
    case CUDNN_TYPE_FLOAT:
    case CUDNN_TYPE_INT32:
        return 4;
    case CUDNN_TYPE_CHAR:
        return 1;
    case CUDNN_TYPE_FRACTION:
        return sizeof(cudnnFraction_t);
    case CUDNN_TYPE_DATA_TYPE:
    case CUDNN_TYPE_CONVOLUTION_MODE:
    case CUDNN_TYPE_HEUR_MODE:
    case CUDNN_TYPE_KNOB_TYPE:
    case CUDNN_TYPE_NAN_PROPOGATION:
    case CUDNN_TYPE_NUMERICAL_NOTE:
    case CUDNN_TYPE_LAYOUT_TYPE:
    case CUDNN_TYPE_ATTRIB_NAME:
    case CUDNN_TYPE_POINTWISE_MODE:
    case CUDNN_TYPE_GENSTATS_MODE:
    case CUDNN_TYPE_BN_FINALIZE_STATS_MODE:
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE:
    case CUDNN_TYPE_BEHAVIOR_NOTE:
    case CUDNN_TYPE_TENSOR_REORDERING_MODE:
    case CUDNN_TYPE_RESAMPLE_MODE:
    case CUDNN_TYPE_PADDING_MODE:
    case CUDNN_TYPE_SIGNAL_MODE:
    case CUDNN_TYPE_NORM_MODE:
    case CUDNN_TYPE_NORM_FWD_PHASE:
    case CUDNN_TYPE_RNG_DISTRIBUTION:
    case CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE:
    case CUDNN_TYPE_RESHAPE_MODE:
    case CUDNN_TYPE_OPERATIONGRAPH_MODE:
        return sizeof(int); /* C enums */
    }
    return 0;
}

fgdnn_desc *fgdnn_desc_new(cudnnBackendDescriptorType_t type)
{
    fgdnn_desc *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->magic = FGDNN_DESC_MAGIC;
    d->type = type;
    pthread_mutex_init(&d->lock, NULL);
    return d;
}

static void attr_clear(fgdnn_attr *a)
{
    if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t i = 0; i < a->count; i++)
            fgdnn_desc_free(((fgdnn_desc **)a->data)[i]);
    free(a->data);
    a->data = NULL;
    a->count = 0;
}

static void attrs_clear(fgdnn_desc *d)
{
    for (size_t i = 0; i < d->nattrs; i++)
        attr_clear(&d->attrs[i]);
    free(d->attrs);
    d->attrs = NULL;
    d->nattrs = d->cap = 0;
}

void fgdnn_desc_free(fgdnn_desc *d)
{
    if (!d)
        return;
    attrs_clear(d);
    d->magic = 0;
    pthread_mutex_destroy(&d->lock);
    free(d);
}

fgdnn_desc *fgdnn_desc_of(cudnnBackendDescriptor_t p)
{
    fgdnn_desc *d = p;
    return d && d->magic == FGDNN_DESC_MAGIC ? d : NULL;
}

static fgdnn_desc *desc_clone(const fgdnn_desc *src);

/* Deep copy of src's attributes into dst's (dst's own are dropped). */
static int copy_attrs(fgdnn_desc *dst, const fgdnn_desc *src)
{
    attrs_clear(dst);
    if (!src->nattrs)
        return 0;
    dst->attrs = calloc(src->nattrs, sizeof *dst->attrs);
    if (!dst->attrs)
        return -1;
    dst->cap = src->nattrs;
    for (size_t i = 0; i < src->nattrs; i++) {
        const fgdnn_attr *a = &src->attrs[i];
        fgdnn_attr *b = &dst->attrs[dst->nattrs];
        *b = (fgdnn_attr){a->name, a->type, 0, NULL};
        size_t bytes = (size_t)a->count * elem_size(a->type);
        if (bytes && !(b->data = malloc(bytes)))
            return -1;
        dst->nattrs++;
        if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
            for (int64_t k = 0; k < a->count; k++) {
                ((fgdnn_desc **)b->data)[k] = desc_clone(((fgdnn_desc **)a->data)[k]);
                b->count = k + 1;
                if (!((fgdnn_desc **)b->data)[k])
                    return -1;
            }
        } else if (bytes) {
            memcpy(b->data, a->data, bytes);
        }
        b->count = a->count;
    }
    dst->finalized = src->finalized;
    return 0;
}

static fgdnn_desc *desc_clone(const fgdnn_desc *src)
{
    fgdnn_desc *d = fgdnn_desc_new(src->type);
    if (d && copy_attrs(d, src) != 0) {
        fgdnn_desc_free(d);
        d = NULL;
    }
    return d;
}

const fgdnn_attr *fgdnn_find(const fgdnn_desc *d, cudnnBackendAttributeName_t name)
{
    for (size_t i = 0; d && i < d->nattrs; i++)
        if (d->attrs[i].name == name)
            return &d->attrs[i];
    return NULL;
}

int fgdnn_get_i64(const fgdnn_desc *d, cudnnBackendAttributeName_t name, int64_t *out)
{
    const fgdnn_attr *a = fgdnn_find(d, name);
    if (!a || a->count < 1)
        return -1;
    if (a->type == CUDNN_TYPE_INT64)
        *out = ((const int64_t *)a->data)[0];
    else if (a->type == CUDNN_TYPE_INT32)
        *out = ((const int32_t *)a->data)[0];
    else
        return -1;
    return 0;
}

fgdnn_desc *fgdnn_get_desc(const fgdnn_desc *d, cudnnBackendAttributeName_t name)
{
    const fgdnn_attr *a = fgdnn_find(d, name);
    return a && a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && a->count == 1 ? ((fgdnn_desc **)a->data)[0] : NULL;
}

/* Store elements (descriptor elements are snapshotted). Caller holds d->lock or owns d. */
static cudnnStatus_t store(fgdnn_desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t count, const void *elems)
{
    size_t es = elem_size(type), bytes = (size_t)count * es;
    fgdnn_attr fresh = {name, type, 0, NULL};
    if (bytes && !(fresh.data = malloc(bytes)))
        return fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of host memory");
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        for (int64_t i = 0; i < count; i++) {
            fgdnn_desc *src = ((fgdnn_desc *const *)elems)[i];
            fgdnn_desc *copy = desc_clone(src);
            ((fgdnn_desc **)fresh.data)[i] = copy;
            fresh.count = i + 1;
            if (!copy) {
                attr_clear(&fresh);
                return fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of host memory");
            }
        }
    } else if (bytes) {
        memcpy(fresh.data, elems, bytes);
    }
    fresh.count = count;
    for (size_t i = 0; i < d->nattrs; i++)
        if (d->attrs[i].name == name) {
            attr_clear(&d->attrs[i]);
            d->attrs[i] = fresh;
            return CUDNN_STATUS_SUCCESS;
        }
    if (d->nattrs == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        fgdnn_attr *grown = realloc(d->attrs, cap * sizeof *grown);
        if (!grown) {
            attr_clear(&fresh);
            return fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of host memory");
        }
        d->attrs = grown;
        d->cap = cap;
    }
    d->attrs[d->nattrs++] = fresh;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t fgdnn_put(fgdnn_desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                        int64_t count, const void *elems)
{
    return store(d, name, type, count, elems);
}

FGC_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                      cudnnBackendDescriptor_t *descriptor)
{
    if (!descriptor)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnBackendCreateDescriptor: descriptor is NULL");
    if ((int)type < 0 || (int)type > CUDNN_BACKEND_OPERATION_ROPE_BWD_DESCRIPTOR)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendCreateDescriptor: unknown descriptor type %d",
                          (int)type);
    fgdnn_desc *d = fgdnn_desc_new(type);
    if (!d)
        return fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of host memory");
    *descriptor = d;
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor)
{
    fgdnn_desc *d = fgdnn_desc_of(descriptor);
    if (!d)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendDestroyDescriptor: not a backend descriptor");
    fgdnn_desc_free(d);
    return CUDNN_STATUS_SUCCESS;
}

FGC_EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                                  cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                                  int64_t count, const void *elems)
{
    fgdnn_desc *d = fgdnn_desc_of(descriptor);
    if (!d)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: not a backend descriptor");
    if (count < 0 || (count > 0 && !elems) || !elem_size(type))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(%d): bad type %d or elements",
                          (int)name, (int)type);
    if (!fgdnn_attr_belongs(d->type, name) || fgdnn_read_only(d->type, name))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: attribute %d cannot be set on a "
                                                  "descriptor of type %d", (int)name, (int)d->type);
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t i = 0; i < count; i++) {
            fgdnn_desc *e = fgdnn_desc_of(((cudnnBackendDescriptor_t const *)elems)[i]);
            if (!e)
                return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(%d): element %lld is not a "
                                                          "backend descriptor", (int)name, (long long)i);
            if (!e->finalized)
                return fgdnn_fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                                  "cudnnBackendSetAttribute(%d): element %lld is not finalized", (int)name,
                                  (long long)i);
        }
    pthread_mutex_lock(&d->lock);
    cudnnStatus_t s = d->finalized ? fgdnn_fail(CUDNN_STATUS_NOT_INITIALIZED,
                                                "cudnnBackendSetAttribute: descriptor already finalized")
                                   : store(d, name, type, count, elems);
    pthread_mutex_unlock(&d->lock);
    return s;
}

FGC_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                                  cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                                  int64_t requested, int64_t *count, void *elems)
{
    fgdnn_desc *d = fgdnn_desc_of(descriptor);
    if (!d)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: not a backend descriptor");
    if (requested < 0 || (!count && !elems))
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute(%d): nowhere to answer", (int)name);
    pthread_mutex_lock(&d->lock);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    const fgdnn_attr *a = fgdnn_find(d, name);
    if (!d->finalized) {
        s = fgdnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "cudnnBackendGetAttribute: descriptor not finalized");
    } else if (!a) {
        /* Either an optional attribute the program never set, or one FakeGPU does not derive: loud. */
        fg_debug("cudnnBackendGetAttribute: attribute %d of descriptor type %d is not available", (int)name,
                 (int)d->type);
        s = (cudnnStatus_t)fgc_refuse("cudnn", "cudnnBackendGetAttribute(unset or underived attribute)",
                                      CUDNN_STATUS_NOT_SUPPORTED);
        fgdnn_fail(s, "cudnnBackendGetAttribute: attribute %d of descriptor type %d is not available", (int)name,
                   (int)d->type);
    } else if (a->type != type) {
        s = fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute(%d): asked as type %d, it is type %d",
                       (int)name, (int)type, (int)a->type);
    } else {
        int64_t n = a->count < requested ? a->count : requested;
        if (elems && type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
            for (int64_t i = 0; i < n && s == CUDNN_STATUS_SUCCESS; i++) {
                fgdnn_desc *out = fgdnn_desc_of(((cudnnBackendDescriptor_t *)elems)[i]);
                const fgdnn_desc *src = ((fgdnn_desc *const *)a->data)[i];
                if (!out || out == d)
                    s = fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute(%d): element %lld is not a "
                                                           "descriptor to fill", (int)name, (long long)i);
                else if (out->type != src->type)
                    s = fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute(%d): element %lld has "
                                                           "type %d, the attribute holds type %d",
                                   (int)name, (long long)i, (int)out->type, (int)src->type);
                else {
                    pthread_mutex_lock(&out->lock);
                    if (copy_attrs(out, src) != 0)
                        s = fgdnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of host memory");
                    pthread_mutex_unlock(&out->lock);
                }
            }
        } else if (elems && n) {
            memcpy(elems, a->data, (size_t)n * elem_size(type));
        }
        /* With an output array the count is what was written (cudnn-frontend sizes its result list by it);
         * without one, how many elements there are. */
        if (s == CUDNN_STATUS_SUCCESS && count)
            *count = elems ? n : a->count;
    }
    pthread_mutex_unlock(&d->lock);
    return s;
}

FGC_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor)
{
    fgdnn_desc *d = fgdnn_desc_of(descriptor);
    if (!d)
        return fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: not a backend descriptor");
    pthread_mutex_lock(&d->lock);
    cudnnStatus_t s = d->finalized ? fgdnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: already finalized")
                                   : fgdnn_finalize(d);
    if (s == CUDNN_STATUS_SUCCESS)
        d->finalized = 1;
    pthread_mutex_unlock(&d->lock);
    return s;
}
