/* What a module image says about its kernels: names, and the offset and size of each parameter. Device code is
 * never loaded (there is no device), but a launch's parameters are how the driver learns which device memory a
 * kernel may write (driver/written.c), so cuModuleLoadData reads the image as far as that.
 *
 * Images come as nvcc leaves them: the fat binary wrapper nvcc-generated host code registers (magic 0x466243b1),
 * a fat binary (0xBA55ED50: one entry per architecture, ELF cubins and PTX, each possibly compressed: LZ4 before
 * CUDA 12.8, zstd since), a cubin (ELF) or PTX text. In a cubin each kernel has a section ".nv.info.<name>" whose
 * EIATTR_KPARAM_INFO attributes give every parameter's ordinal, offset and size; PTX declares them in the
 * `.entry` line. Of a fat binary's cubins the one for the current device's architecture is read (the one a driver
 * would load), else another cubin (parameter layouts follow the source, not the architecture), else PTX.
 *
 * zstd is decoded by the system's libzstd.so.1 (dlopen'ed when first needed; every Linux distribution ships it);
 * without it such an image is opaque: its kernels are found by any name, with no parameter layout, and a launch of
 * one counts as writing all device memory (conservative). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fgd_module.h"

#define WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xba55ed50u
#define FATBIN_KIND_PTX 1
#define FATBIN_KIND_ELF 2
#define FATBIN_FLAG_LZ4 0x2000ull
#define FATBIN_FLAG_ZSTD 0x8000ull
#define EIATTR_KPARAM_INFO 0x17
#define EIFMT_SVAL 4
#define MAX_IMAGE (1ull << 32) /* no real module comes near; a larger size field is a corrupt image */

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* ---- the kernel list being built ---- */

static int add_kernel(fgd_kernel_list *out, const char *name, size_t len)
{
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 64;
        fgd_kernel_info *grown = realloc(out->k, cap * sizeof *grown);
        if (!grown)
            return -1;
        out->k = grown;
        out->cap = cap;
    }
    fgd_kernel_info *k = &out->k[out->n];
    memset(k, 0, sizeof *k);
    k->name = strndup(name, len);
    if (!k->name)
        return -1;
    out->n++;
    return 0;
}

static int add_param(fgd_kernel_info *k, unsigned ordinal, uint32_t offset, uint32_t size)
{
    if (ordinal >= 4096) /* CUDA's limit on parameter space is 32764 bytes: at most that many ordinals */
        return -1;
    if (ordinal >= k->nparams) {
        struct fgd_param *grown = realloc(k->params, (ordinal + 1) * sizeof *grown);
        if (!grown)
            return -1;
        memset(grown + k->nparams, 0, (ordinal + 1 - k->nparams) * sizeof *grown);
        k->params = grown;
        k->nparams = ordinal + 1;
    }
    k->params[ordinal] = (struct fgd_param){offset, size};
    if (offset + size > k->param_bytes)
        k->param_bytes = offset + size;
    return 0;
}

void fgd_kernel_list_free(fgd_kernel_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->k[i].name);
        free(l->k[i].params);
    }
    free(l->k);
    memset(l, 0, sizeof *l);
}

/* ---- cubin (ELF64, little endian) ---- */

static int is_elf(const unsigned char *p) { return p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F'; }

/* The attributes of one ".nv.info.<kernel>" section. */
static int parse_nv_info(fgd_kernel_info *k, const unsigned char *p, size_t n)
{
    size_t at = 0;
    while (at + 4 <= n) {
        unsigned fmt = p[at], attr = p[at + 1];
        size_t len = fmt == EIFMT_SVAL ? rd16(p + at + 2) : 0;
        const unsigned char *val = p + at + 4;
        if (fmt < 1 || fmt > EIFMT_SVAL || at + 4 + len > n)
            return -1;
        if (attr == EIATTR_KPARAM_INFO && fmt == EIFMT_SVAL && len >= 12) {
            /* index (4), ordinal (2), offset (2), then flags whose bits 18..31 are the size in bytes */
            if (add_param(k, rd16(val + 4), rd16(val + 6), (rd32(val + 8) >> 18) & 0x3fff) != 0)
                return -1;
        }
        at += 4 + len;
    }
    return 0;
}

/* `size` bounds the image when known (a fat binary entry), else 0: the section table is trusted. */
static CUresult parse_elf(const unsigned char *img, size_t size, fgd_kernel_list *out)
{
    if (img[4] != 2 || img[5] != 1) /* ELFCLASS64, ELFDATA2LSB */
        return CUDA_ERROR_INVALID_IMAGE;
    uint64_t shoff = rd64(img + 0x28);
    unsigned shentsize = rd16(img + 0x3a), shnum = rd16(img + 0x3c), shstrndx = rd16(img + 0x3e);
    if (shentsize < 64 || shstrndx >= shnum || shoff > MAX_IMAGE ||
        (size && shoff + (uint64_t)shnum * shentsize > size))
        return CUDA_ERROR_INVALID_IMAGE;
    const unsigned char *sh = img + shoff, *strsec = sh + (size_t)shstrndx * shentsize;
    uint64_t stroff = rd64(strsec + 0x18), strsize = rd64(strsec + 0x20);
    if (stroff > MAX_IMAGE || strsize > MAX_IMAGE || (size && stroff + strsize > size))
        return CUDA_ERROR_INVALID_IMAGE;
    const char *strtab = (const char *)img + stroff;
    static const char prefix[] = ".nv.info.";
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *s = sh + (size_t)i * shentsize;
        uint32_t name = rd32(s);
        uint64_t off = rd64(s + 0x18), len = rd64(s + 0x20);
        if (name >= strsize || off > MAX_IMAGE || len > MAX_IMAGE || (size && off + len > size))
            continue;
        const char *nm = strtab + name;
        size_t nmlen = strnlen(nm, strsize - name);
        if (nmlen <= sizeof prefix - 1 || memcmp(nm, prefix, sizeof prefix - 1) != 0)
            continue;
        if (add_kernel(out, nm + sizeof prefix - 1, nmlen - (sizeof prefix - 1)) != 0 ||
            parse_nv_info(&out->k[out->n - 1], img + off, (size_t)len) != 0)
            return CUDA_ERROR_INVALID_IMAGE;
        out->k[out->n - 1].layout = 1;
    }
    return CUDA_SUCCESS;
}

/* ---- PTX: `.entry name ( .param .type [.ptr ...] [.align N] pname[[count]], ... )` ---- */

static const char *skip_space(const char *p, const char *end)
{
    while (p < end) {
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        else if (p + 1 < end && p[0] == '/' && p[1] == '/')
            while (p < end && *p != '\n')
                p++;
        else if (p + 1 < end && p[0] == '/' && p[1] == '*') {
            const char *c = p + 2;
            while (c + 1 < end && !(c[0] == '*' && c[1] == '/'))
                c++;
            p = c + 1 < end ? c + 2 : end;
        } else
            break;
    }
    return p;
}

static int ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c == '%' || c == '.';
}

static size_t ptx_type_size(const char *t, size_t n)
{
    if (n < 3 || t[0] != '.')
        return 0;
    unsigned bits = (unsigned)atoi(t + 2);
    if (t[1] == 'b' || t[1] == 'u' || t[1] == 's' || t[1] == 'f')
        return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? bits / 8 : 0;
    return 0;
}

static CUresult parse_ptx(const char *text, size_t size, fgd_kernel_list *out)
{
    const char *p = text, *end = text + size;
    while ((p = memmem(p, (size_t)(end - p), ".entry", 6)) != NULL) {
        p = skip_space(p + 6, end);
        const char *name = p;
        while (p < end && ident_char(*p))
            p++;
        if (p == name || add_kernel(out, name, (size_t)(p - name)) != 0)
            return CUDA_ERROR_INVALID_IMAGE;
        fgd_kernel_info *k = &out->k[out->n - 1];
        k->layout = 1;
        p = skip_space(p, end);
        if (p >= end || *p != '(')
            continue; /* no parameter list: a kernel without parameters */
        uint32_t offset = 0;
        unsigned ordinal = 0;
        for (p++;;) {
            p = skip_space(p, end);
            if (p >= end)
                return CUDA_ERROR_INVALID_IMAGE;
            if (*p == ')')
                break;
            if (*p == ',') {
                p++;
                continue;
            }
            /* one parameter: words up to ',' or ')' */
            size_t elem = 0, align = 0, count = 1;
            while (p < end && *p != ',' && *p != ')') {
                const char *w = p;
                while (p < end && ident_char(*p))
                    p++;
                size_t wl = (size_t)(p - w);
                if (wl == 6 && memcmp(w, ".align", 6) == 0) {
                    p = skip_space(p, end);
                    align = (size_t)strtoul(p, (char **)&p, 10);
                } else if (wl && ptx_type_size(w, wl)) {
                    elem = ptx_type_size(w, wl);
                } else if (p < end && *p == '[') {
                    count = (size_t)strtoul(p + 1, (char **)&p, 10);
                    while (p < end && *p != ']')
                        p++;
                    if (p < end)
                        p++;
                } else if (!wl) {
                    p++;
                }
                p = skip_space(p, end);
            }
            if (!elem) { /* a type we do not size (.texref, .samplerref): this kernel's layout is unknown */
                k->layout = 0;
                while (p < end && *p != ')')
                    p++;
                break;
            }
            if (!align)
                align = elem;
            offset = (uint32_t)((offset + align - 1) / align * align);
            if (add_param(k, ordinal++, offset, (uint32_t)(elem * count)) != 0)
                return CUDA_ERROR_INVALID_IMAGE;
            offset += (uint32_t)(elem * count);
        }
    }
    return CUDA_SUCCESS;
}

static int is_ptx(const char *text)
{
    const char *p = skip_space(text, text + 4096);
    return strncmp(p, ".version", 8) == 0 || strncmp(p, ".target", 7) == 0;
}

/* ---- decompression ---- */

/* LZ4 block format (no frame): what fat binaries before CUDA 12.8 compress with. Returns the bytes written. */
static size_t lz4_block(const unsigned char *in, size_t n, unsigned char *out, size_t cap)
{
    const unsigned char *ip = in, *iend = in + n;
    unsigned char *op = out, *oend = out + cap;
    while (ip < iend) {
        unsigned token = *ip++;
        size_t lit = token >> 4;
        if (lit == 15) {
            unsigned b;
            do {
                if (ip >= iend)
                    return 0;
                lit += b = *ip++;
            } while (b == 255);
        }
        if (lit > (size_t)(iend - ip) || lit > (size_t)(oend - op))
            return 0;
        memcpy(op, ip, lit);
        op += lit, ip += lit;
        if (ip >= iend)
            break; /* the last sequence is literals only */
        if (iend - ip < 2)
            return 0;
        size_t off = rd16(ip);
        ip += 2;
        size_t match = token & 15;
        if (match == 15) {
            unsigned b;
            do {
                if (ip >= iend)
                    return 0;
                match += b = *ip++;
            } while (b == 255);
        }
        match += 4;
        if (!off || off > (size_t)(op - out) || match > (size_t)(oend - op))
            return 0;
        for (const unsigned char *m = op - off; match--;) /* byte by byte: the match may overlap its output */
            *op++ = *m++;
    }
    return (size_t)(op - out);
}

typedef size_t (*zstd_decompress_fn)(void *, size_t, const void *, size_t);
typedef unsigned (*zstd_is_error_fn)(size_t);

static size_t zstd_frame(const unsigned char *in, size_t n, unsigned char *out, size_t cap)
{
    static zstd_decompress_fn decompress;
    static zstd_is_error_fn is_error;
    static int tried;
    if (!tried) { /* a benign race: every thread that races finds the same symbols */
        void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            is_error = (zstd_is_error_fn)dlsym(h, "ZSTD_isError");
            decompress = (zstd_decompress_fn)dlsym(h, "ZSTD_decompress");
        }
        if (!decompress || !is_error)
            fg_debug("libcuda: libzstd.so.1 not found: zstd-compressed kernels have no parameter information");
        tried = 1;
    }
    if (!decompress || !is_error)
        return 0;
    size_t got = decompress(out, cap, in, n);
    return is_error(got) ? 0 : got;
}

/* ---- fat binaries ---- */

typedef struct {
    unsigned kind, arch;
    uint64_t flags;
    const unsigned char *payload;
    size_t payload_size, expanded_size;
} fat_entry;

static int read_entry(const unsigned char *e, const unsigned char *end, fat_entry *out, size_t *next)
{
    if (end - e < 64)
        return -1;
    uint32_t header = rd32(e + 4);
    uint64_t padded = rd64(e + 8);
    if (header < 64 || header > (size_t)(end - e) || padded > (uint64_t)(end - e) - header)
        return -1;
    out->kind = rd16(e);
    out->arch = rd32(e + 28);
    out->flags = rd64(e + 40);
    out->payload = e + header;
    out->payload_size = (size_t)padded;
    if (out->flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD)) {
        uint32_t compressed = rd32(e + 16);
        out->payload_size = compressed && compressed <= padded ? compressed : (size_t)padded;
        out->expanded_size = (size_t)rd64(e + 56);
    } else {
        out->expanded_size = 0;
    }
    *next = header + (size_t)padded;
    return 0;
}

/* The architecture a device of compute capability cc (major*10+minor) runs best: its own, else the newest
 * cubin of its major below it, else any cubin, else PTX. */
static int rank(const fat_entry *e, int cc)
{
    if (e->kind == FATBIN_KIND_ELF) {
        if ((int)e->arch == cc)
            return 4;
        if ((int)e->arch / 10 == cc / 10 && (int)e->arch < cc)
            return 3;
        return 2;
    }
    return e->kind == FATBIN_KIND_PTX ? 1 : 0;
}

static CUresult parse_entry(const fat_entry *e, fgd_kernel_list *out, int *opaque)
{
    const unsigned char *data = e->payload;
    size_t size = e->payload_size;
    unsigned char *expanded = NULL;
    if (e->flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD)) {
        if (!e->expanded_size || e->expanded_size > MAX_IMAGE)
            return CUDA_ERROR_INVALID_IMAGE;
        expanded = malloc(e->expanded_size + 1);
        if (!expanded)
            return CUDA_ERROR_OUT_OF_MEMORY;
        size = e->flags & FATBIN_FLAG_ZSTD ? zstd_frame(data, size, expanded, e->expanded_size)
                                           : lz4_block(data, size, expanded, e->expanded_size);
        if (!size) {
            free(expanded);
            *opaque = 1; /* a compression we cannot decode: the image may well be fine */
            return CUDA_SUCCESS;
        }
        expanded[size] = 0;
        data = expanded;
    }
    CUresult rc;
    if (e->kind == FATBIN_KIND_ELF)
        rc = size >= 64 && is_elf(data) ? parse_elf(data, size, out) : CUDA_ERROR_INVALID_IMAGE;
    else
        rc = parse_ptx((const char *)data, strnlen((const char *)data, size), out);
    free(expanded);
    return rc;
}

static CUresult parse_fatbin(const unsigned char *fb, int cc, fgd_kernel_list *out, int *opaque)
{
    unsigned header = rd16(fb + 6);
    uint64_t body = rd64(fb + 8);
    if (header < 16 || body > MAX_IMAGE)
        return CUDA_ERROR_INVALID_IMAGE;
    const unsigned char *e = fb + header, *end = e + body;
    fat_entry best = {0}, cur;
    int best_rank = 0;
    size_t next;
    while (e < end && read_entry(e, end, &cur, &next) == 0) {
        int r = rank(&cur, cc);
        if (r > best_rank)
            best = cur, best_rank = r;
        e += next;
    }
    if (!best_rank)
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    return parse_entry(&best, out, opaque);
}

CUresult fgd_image_kernels(const void *image, int cc, fgd_kernel_list *out, int *opaque)
{
    memset(out, 0, sizeof *out);
    *opaque = 0;
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned char *p = image;
    if (rd32(p) == WRAPPER_MAGIC) /* __fatBinC_Wrapper_t: magic, version, the fat binary, a file name */
        p = (const unsigned char *)(uintptr_t)rd64(p + 8);
    if (!p)
        return CUDA_ERROR_INVALID_IMAGE;
    CUresult rc;
    if (rd32(p) == FATBIN_MAGIC)
        rc = parse_fatbin(p, cc, out, opaque);
    else if (is_elf(p))
        rc = parse_elf(p, 0, out);
    else if (is_ptx((const char *)p))
        rc = parse_ptx((const char *)p, strlen((const char *)p), out);
    else
        rc = CUDA_ERROR_INVALID_IMAGE;
    if (rc != CUDA_SUCCESS)
        fgd_kernel_list_free(out);
    return rc;
}
