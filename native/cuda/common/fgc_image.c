#include "fgc_image.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { put16(p, (uint16_t)v), put16(p + 2, (uint16_t)(v >> 16)); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v), put32(p + 4, (uint32_t)(v >> 32)); }

#define EHDR 64
#define SHDR 64

/* Layout: [wrapper 24][fat binary header 16][entry header 64][ELF: header, .shstrtab, .nv.info.<name>, section
 * headers (null, .shstrtab, .nv.info.<name>)]. */
void *fgc_image_new(const char *name, unsigned npointers)
{
    static const char info_prefix[] = ".nv.info.";
    size_t nlen = strlen(name);
    size_t strtab = 1 + sizeof ".shstrtab" + sizeof info_prefix - 1 + nlen + 1;
    size_t info = (size_t)npointers * 16; /* one EIATTR_KPARAM_INFO (4 + 12 bytes) per parameter */
    size_t str_off = EHDR, info_off = (str_off + strtab + 7) / 8 * 8, sh_off = (info_off + info + 7) / 8 * 8;
    size_t elf = sh_off + 3 * SHDR;
    size_t total = 24 + 16 + 64 + elf;
    unsigned char *b = calloc(1, total);
    if (!b)
        return NULL;
    unsigned char *fat = b + 24, *entry = fat + 16, *e = entry + 64;
    /* __fatBinC_Wrapper_t: magic, version 1, the fat binary, no file name */
    put32(b, 0x466243b1u);
    put32(b + 4, 1);
    put64(b + 8, (uint64_t)(uintptr_t)fat);
    /* fat binary: magic, version 1, header size, size of what follows; one uncompressed ELF entry */
    put32(fat, 0xba55ed50u);
    put16(fat + 4, 1);
    put16(fat + 6, 16);
    put64(fat + 8, 64 + elf);
    put16(entry, 2);          /* kind: ELF */
    put16(entry + 2, 0x0101); /* version */
    put32(entry + 4, 64);     /* header size */
    put64(entry + 8, elf);    /* payload size */
    put64(entry + 40, 0x11);  /* flags: 64-bit, Linux */
    /* ELF64 header: EM_CUDA, ET_EXEC, section headers at sh_off, .shstrtab is section 1 */
    memcpy(e, "\x7f" "ELF\x02\x01\x01", 7);
    put16(e + 0x10, 2);
    put16(e + 0x12, 190);
    put32(e + 0x14, 1);
    put64(e + 0x28, sh_off);
    put16(e + 0x34, EHDR);
    put16(e + 0x3a, SHDR);
    put16(e + 0x3c, 3);
    put16(e + 0x3e, 1);
    /* .shstrtab: "\0.shstrtab\0.nv.info.<name>\0" */
    unsigned char *s = e + str_off;
    memcpy(s + 1, ".shstrtab", sizeof ".shstrtab");
    size_t info_name = 1 + sizeof ".shstrtab";
    memcpy(s + info_name, info_prefix, sizeof info_prefix - 1);
    memcpy(s + info_name + sizeof info_prefix - 1, name, nlen);
    /* .nv.info.<name>: EIFMT_SVAL, EIATTR_KPARAM_INFO, 12 bytes: index, ordinal, offset, size << 18 */
    for (unsigned i = 0; i < npointers; i++) {
        unsigned char *a = e + info_off + (size_t)i * 16;
        a[0] = 0x04, a[1] = 0x17;
        put16(a + 2, 12);
        put16(a + 8, (uint16_t)i);
        put16(a + 10, (uint16_t)(i * 8));
        put32(a + 12, (8u << 18) | 0x1f000u);
    }
    unsigned char *sh = e + sh_off;
    put32(sh + SHDR + 0, 1); /* .shstrtab: SHT_STRTAB */
    put32(sh + SHDR + 4, 3);
    put64(sh + SHDR + 0x18, str_off);
    put64(sh + SHDR + 0x20, strtab);
    put32(sh + 2 * SHDR + 0, (uint32_t)info_name); /* .nv.info.<name>: SHT_LOPROC, as nvcc writes it */
    put32(sh + 2 * SHDR + 4, 0x70000000u);
    put64(sh + 2 * SHDR + 0x18, info_off);
    put64(sh + 2 * SHDR + 0x20, info);
    return b;
}

int fgc_standin_compute(const char *name)
{
    if (!name)
        return 0;
    if (strncmp(name, "cublas", 6) == 0)
        return 1;
    return strncmp(name, "cudnn:", 6) == 0 &&
           (strstr(name, "Convolution") || strstr(name, "Matmul") || strstr(name, "Sdpa"));
}
