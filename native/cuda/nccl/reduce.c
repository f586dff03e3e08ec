/* Reductions of collective data on the host: what NCCL's kernels compute, done in rank order so that every rank
 * derives the same bits. Half and bfloat16 are reduced in float and rounded to nearest even on store.
 * PreMulSum ops (ncclRedOpCreatePreMulSum) multiply each input by their scalar, then sum. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "fgn.h"

size_t fgn_type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

static float h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 0x3ff, u;
    if (e == 31)
        u = s | 0x7f800000 | m << 13;
    else if (e)
        u = s | (e + 112) << 23 | m << 13;
    else if (!m)
        u = s;
    else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400)) {
            m <<= 1;
            e--;
        }
        u = s | e << 23 | (m & 0x3ff) << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f2h(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    if (isnan(f))
        return s | 0x7e00;
    float a = fabsf(f);
    if (a >= 65520.0f)
        return s | 0x7c00;
    if (a < 6.103515625e-05f) { /* subnormal half: a multiple of 2^-24, rounded to nearest even */
        float x = a * 16777216.0f;
        uint32_t q = (uint32_t)x;
        float frac = x - (float)q;
        return s | (uint16_t)(q + (frac > 0.5f || (frac == 0.5f && (q & 1))));
    }
    uint32_t e = ((u >> 23) & 0xff) - 112, m = u & 0x7fffff;
    uint32_t h = e << 10 | m >> 13, rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return s | (uint16_t)h;
}

static float bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f))
        return (uint16_t)(u >> 16) | 0x40;
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* ---- PreMulSum ops: op ids from ncclNumOps up, each a scalar (host value, or device pointer read at use) ---- */

#define MAX_PREMUL 256
static struct {
    int used;
    ncclDataType_t type;
    int on_device;
    const void *ptr;
    unsigned char value[8];
} premul[MAX_PREMUL];
static pthread_mutex_t premul_lock = PTHREAD_MUTEX_INITIALIZER;

static double scalar_of(ncclDataType_t t, const void *p)
{
    switch (t) {
    case ncclInt8: return *(const int8_t *)p;
    case ncclUint8: return *(const uint8_t *)p;
    case ncclInt32: return *(const int32_t *)p;
    case ncclUint32: return *(const uint32_t *)p;
    case ncclInt64: return (double)*(const int64_t *)p;
    case ncclUint64: return (double)*(const uint64_t *)p;
    case ncclFloat16: return h2f(*(const uint16_t *)p);
    case ncclBfloat16: return bf2f(*(const uint16_t *)p);
    case ncclFloat32: return *(const float *)p;
    case ncclFloat64: return *(const double *)p;
    default: return 1.0;
    }
}

FGC_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                                 ncclScalarResidence_t residence, ncclComm_t comm)
{
    if (!op || !scalar || !comm || !fgn_type_size(datatype))
        return ncclInvalidArgument;
    pthread_mutex_lock(&premul_lock);
    int i = 0;
    while (i < MAX_PREMUL && premul[i].used)
        i++;
    if (i < MAX_PREMUL) {
        premul[i].used = 1;
        premul[i].type = datatype;
        premul[i].on_device = residence == ncclScalarDevice;
        premul[i].ptr = scalar;
        memcpy(premul[i].value, scalar, fgn_type_size(datatype)); /* host scalars are read at creation */
    }
    pthread_mutex_unlock(&premul_lock);
    if (i == MAX_PREMUL)
        return ncclSystemError;
    *op = (ncclRedOp_t)(ncclNumOps + i);
    return ncclSuccess;
}

FGC_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    int i = (int)op - ncclNumOps;
    if (!comm || i < 0 || i >= MAX_PREMUL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&premul_lock);
    int was = premul[i].used;
    premul[i].used = 0;
    pthread_mutex_unlock(&premul_lock);
    return was ? ncclSuccess : ncclInvalidArgument;
}

#define REDUCE(T, LOAD, STORE)                                                                                    \
    for (size_t i = 0; i < count; i++) {                                                                          \
        T acc = (T)(LOAD(in[0], i) * (is_premul ? (T)scale : (T)1));                                              \
        for (int r = 1; r < nin; r++) {                                                                           \
            T v = LOAD(in[r], i);                                                                                 \
            switch (kind) {                                                                                       \
            case ncclProd: acc = (T)(acc * v); break;                                                             \
            case ncclMax: acc = v > acc ? v : acc; break;                                                         \
            case ncclMin: acc = v < acc ? v : acc; break;                                                         \
            default: acc = (T)(acc + (is_premul ? (T)(v * (T)scale) : v)); break; /* sum, avg, premul sum */      \
            }                                                                                                     \
        }                                                                                                         \
        if (kind == ncclAvg)                                                                                      \
            acc = (T)(acc / (T)nin);                                                                              \
        STORE(out, i, acc);                                                                                       \
    }

#define PLAIN_LOAD(p, i) (((const TT *)(p))[i])
#define PLAIN_STORE(p, i, v) (((TT *)(p))[i] = (v))
#define H_LOAD(p, i) h2f(((const uint16_t *)(p))[i])
#define H_STORE(p, i, v) (((uint16_t *)(p))[i] = f2h(v))
#define BF_LOAD(p, i) bf2f(((const uint16_t *)(p))[i])
#define BF_STORE(p, i, v) (((uint16_t *)(p))[i] = f2bf(v))

int fgn_reduce(void *out, const void *const *in, int nin, size_t count, ncclDataType_t t, ncclRedOp_t op)
{
    int kind = (int)op, is_premul = 0;
    double scale = 1.0;
    if (kind >= ncclNumOps) {
        int i = kind - ncclNumOps;
        if (i >= MAX_PREMUL || !premul[i].used)
            return -1;
        scale = scalar_of(premul[i].type, premul[i].on_device ? premul[i].ptr : premul[i].value);
        is_premul = 1;
        kind = ncclSum;
    } else if (kind < 0) {
        return -1;
    }
    switch (t) {
#define TT int8_t
    case ncclInt8: REDUCE(int8_t, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
#define TT uint8_t
    case ncclUint8: REDUCE(uint8_t, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
#define TT int32_t
    case ncclInt32: REDUCE(int32_t, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
#define TT uint32_t
    case ncclUint32: REDUCE(uint32_t, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
#define TT int64_t
    case ncclInt64: REDUCE(int64_t, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
#define TT uint64_t
    case ncclUint64: REDUCE(uint64_t, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
#define TT float
    case ncclFloat32: REDUCE(float, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
#define TT double
    case ncclFloat64: REDUCE(double, PLAIN_LOAD, PLAIN_STORE) return 0;
#undef TT
    case ncclFloat16: REDUCE(float, H_LOAD, H_STORE) return 0;
    case ncclBfloat16: REDUCE(float, BF_LOAD, BF_STORE) return 0;
    default: return -1; /* fp8: not reduced here (the caller keeps the rank-local answer and records it) */
    }
}
