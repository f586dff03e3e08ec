/* The one kind of kernel native mode carries out: a fill of contiguous memory with one constant.
 *
 * Kernels do not run here, so what they write is unknown (driver/written.c), and a program that reads it decides
 * on stale bytes. A fill is different: its result is a constant the host passed as a launch parameter, exactly as
 * a memset's is, so it can be done on the host and the bytes become host-known. This matters to control flow
 * built on device scalars a fill makes: GradScaler's found_inf is torch.full((), 0.0) that the unscale kernel only
 * ever sets to 1 on an inf or NaN (no kernel runs here, so none is found), and reading it decides whether the
 * optimizer steps; a step skipped on stale bytes allocates no optimizer state, so the memory plan is wrong.
 *
 * PyTorch (ATen's fill kernel; torch.full, ones, zeros, *_like, fill_, zero_) fills a contiguous tensor with
 *     at::native::vectorized_elementwise_kernel<V, at::native::FillFunctor<T>, std::array<char*, 1>[, bool]>
 *         (int N, FillFunctor<T> f, std::array<char*, 1> data)
 * which sets the N elements of T from data[0] on to f's value; the functor holds nothing but that value, so its
 * parameter's bytes are one element (its size is T's, whatever T is: bool to complex<double>). V (the vector width)
 * and the trailing bool (torch 2.15's choice of work per thread) only change how threads share the N elements
 * (CUDALoops.cuh, which the wheels ship under torch/include). gpu_kernel uses that kernel only for an output
 * TensorIterator finds contiguous, and splits a fill past 32-bit indexing into several such launches.
 * A strided fill (x[:, 0].fill_(v)) goes through elementwise_kernel with an offset calculator in a lambda, whose
 * layout is private to the build: it stays a kernel write, as does every other kernel. The layout is checked
 * against the module's parameter information (three parameters: 4-byte N, one element, one pointer), and a fill
 * that would run past its allocation (a GPU would fault) is left alone too.
 *
 * Carrying a fill out costs host memory for the bytes it sets unless they are zeros (whole pages are dropped then,
 * driver/memory.c). Values control flow reads are small (scalars, masks, counters); a nonzero fill larger than
 * CARRY_NONZERO_MAX is a buffer only kernels will read, and is left as a kernel write, which spends nothing, as
 * native mode promises for memory the program does not copy in. */
#include <stddef.h>
#include <string.h>

#include "fgd_module.h"

/* The mangled name: prefix, V (digits), "FillFunctor<" T (any mangling) ">", the output array, the optional bool
 * template argument (Lb0E or Lb1E), and the signature (int, T0, T1). */
static const char vectorized[] = "_ZN2at6native29vectorized_elementwise_kernelILi";
static const char fill_functor[] = "ENS0_11FillFunctorI";
static const char one_output[] = "EESt5arrayIPcLm1EE";
static const char signature[] = "EEviT0_T1_";

static int ends_with(const char *s, size_t n, const char *tail, size_t *left)
{
    size_t k = strlen(tail);
    if (n < k || memcmp(s + n - k, tail, k) != 0)
        return 0;
    *left = n - k;
    return 1;
}

static int named_like_fill(const char *name)
{
    size_t n = strlen(name), lp = sizeof vectorized - 1, lf = sizeof fill_functor - 1;
    if (strncmp(name, vectorized, lp) != 0 || !ends_with(name, n, signature, &n))
        return 0;
    if (n >= 4 && memcmp(name + n - 4, "Lb", 2) == 0 && (name[n - 2] == '0' || name[n - 2] == '1') &&
        name[n - 1] == 'E')
        n -= 4;
    if (!ends_with(name, n, one_output, &n))
        return 0;
    const char *p = name + lp, *end = name + n;
    if (p >= end || *p < '0' || *p > '9')
        return 0;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return end - p > (ptrdiff_t)lf && memcmp(p, fill_functor, lf) == 0; /* and T is not empty */
}

int fgd_fill_kernel(const char *name, int layout, unsigned nparams, const struct fgd_param *params)
{
    if (!layout || nparams != 3 || !named_like_fill(name))
        return 0;
    uint32_t width = params[1].size;
    return params[0].size == 4 && params[2].size == sizeof(uintptr_t) && width >= 1 && width <= 16;
}

#define CARRY_NONZERO_MAX (64u << 20)

static int zeros(const unsigned char *v, size_t n)
{
    while (n && v[n - 1] == 0)
        n--;
    return n == 0;
}

/* The bytes of parameter i: from the kernelParams array, or at its offset in a packed buffer. */
static const unsigned char *param(const struct CUfunc_st *f, unsigned i, void **params, const unsigned char *buf,
                                  size_t size)
{
    const struct fgd_param *p = &f->params[i];
    if (buf)
        return p->offset + p->size <= size ? buf + p->offset : NULL;
    return params ? params[i] : NULL;
}

int fgd_fill_launched(const struct CUfunc_st *f, void **params, const unsigned char *buf, size_t size)
{
    const unsigned char *n_at = param(f, 0, params, buf, size), *value = param(f, 1, params, buf, size);
    const unsigned char *data_at = param(f, 2, params, buf, size);
    if (!n_at || !value || !data_at)
        return 0;
    int32_t n;
    uintptr_t data, end;
    memcpy(&n, n_at, sizeof n);
    memcpy(&data, data_at, sizeof data);
    size_t width = f->params[1].size;
    if (n <= 0)
        return 1; /* nothing to write */
    fgd_alloc_ends(&data, 1, &end);
    if (!end || (end - data) / width < (size_t)n)
        return 0; /* not device memory, or past its allocation: a GPU would fault; left as a kernel write */
    if ((size_t)n * width > CARRY_NONZERO_MAX && !zeros(value, width))
        return 0;
    return fgd_set_pattern(data, value, width, (size_t)n) == 0;
}
