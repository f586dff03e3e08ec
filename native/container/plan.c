#include "plan.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIB_SUBDIR "fakegpu"
#define NVIDIA_MAJOR 195
#define NVIDIACTL_MINOR 255
#define UVM_MAJOR 510

/* Folders a glibc image's libc.so.6 may live in, in inject.py's order. */
static const char *GLIBC_DIRS[] = {"usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
                                   "lib/aarch64-linux-gnu",    "usr/lib64",            "lib64",
                                   "usr/lib",                  "lib"};

int fg_plan_in_lib_dir(const char *dest)
{
    const char *slash = strrchr(dest, '/');
    if (dest[0] != '/' || !slash || slash == dest || !slash[1])
        return 0;
    const char *name = slash + 1;
    if (strcmp(name, LIB_SUBDIR) && strcmp(name, FG_CATALOG_TABLE_NAME) && !(!strncmp(name, "lib", 3) && strstr(name, ".so")))
        return 0; /* a folder such as /usr/lib/x86_64-linux-gnu itself */
    size_t n = (size_t)(slash - dest) - 1;
    for (size_t i = 0; i < sizeof GLIBC_DIRS / sizeof GLIBC_DIRS[0]; i++)
        if (strlen(GLIBC_DIRS[i]) == n && !strncmp(dest + 1, GLIBC_DIRS[i], n))
            return 1;
    return 0;
}

/* A string made from a format with exactly two %s. */
static char *fmt(const char *f, const char *x, const char *y)
{
    size_t n = strlen(f) + strlen(x) + strlen(y) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, f, x, y);
    return s;
}

void fg_plan_init(fg_plan *p) { memset(p, 0, sizeof *p); }

/* inject.py's _split_shared_object: length of the 'libX.so' part for lib[A-Za-z0-9_+-]+.so(.[0-9]+)*, else 0.
 * *versioned tells whether a version follows. */
static size_t split_so(const char *name, int *versioned)
{
    const char *at = strstr(name, ".so");
    if (strncmp(name, "lib", 3) || !at || at - name <= 3)
        return 0;
    for (const char *c = name + 3; c < at; c++)
        if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') && !(*c >= '0' && *c <= '9') && !strchr("_+-", *c))
            return 0;
    const char *v = at + 3;
    *versioned = *v != '\0';
    if (*v) {
        if (*v != '.')
            return 0;
        for (const char *part = v + 1;;) { /* each part one or more ASCII digits */
            size_t digits = strspn(part, "0123456789");
            if (!digits || (part[digits] && part[digits] != '.'))
                return 0;
            if (!part[digits])
                break;
            part += digits + 1;
        }
    }
    return (size_t)(at + 3 - name);
}

static int add(fg_pair *list, size_t *n, char *a, char *b, char *err, size_t errlen)
{
    if (*n == FG_PLAN_MAX || !a || !b) {
        snprintf(err, errlen, "too many files in the native build folder");
        free(a);
        free(b);
        return -1;
    }
    list[*n].a = a;
    list[*n].b = b;
    (*n)++;
    return 0;
}

static int taken(const fg_plan *p, const char *path)
{
    for (size_t i = 0; i < p->nlinks; i++)
        if (!strcmp(p->links[i].a, path))
            return 1;
    for (size_t i = 0; i < p->nfiles; i++)
        if (!strcmp(p->files[i].b, path))
            return 1;
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static mode_t lstat_mode(const char *dir, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return lstat(path, &st) == 0 ? st.st_mode : 0;
}

/* Whether the 'libX.so' part (base_len bytes of name) is one of contract.DRIVER_LIBRARIES. */
static int driver_library(const char *name, size_t base_len)
{
    static const char *const names[] = {FG_DRIVER_LIBRARIES};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == base_len && !strncmp(name, names[i], base_len))
            return 1;
    return 0;
}

/* place() of plan_injection: a file of the folder is reached through the folder mount, a link out of it gets
 * its own file mount. With a driver version, a driver library's link into the folder takes the real driver's
 * name (libcuda.so.<driver>) and the soname links to that; soname_of records (versioned path, soname). */
static int place(fg_plan *p, const char *dir, const char *name, mode_t mode, char **inside, size_t *ninside,
                 const char *driver, fg_pair *soname_of, size_t *nsoname, char *err, size_t errlen)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (S_ISREG(mode)) {
        inside[(*ninside)++] = (char *)name;
        int versioned = 0;
        size_t base_len = split_so(name, &versioned);
        if (driver && *driver && base_len && versioned && driver_library(name, base_len) && *nsoname < 8) {
            char real[256];
            snprintf(real, sizeof real, "%.*s.%s", (int)base_len, name, driver);
            soname_of[*nsoname].a = fmt("%s/%s", p->lib_dir, real);
            soname_of[(*nsoname)++].b = (char *)name;
            return add(p->links, &p->nlinks, fmt("%s/%s", p->lib_dir, real), fmt("%s/%s", LIB_SUBDIR, name), err,
                       errlen) ||
                   add(p->links, &p->nlinks, fmt("%s/%s", p->lib_dir, name), strdup(real), err, errlen);
        }
        return add(p->links, &p->nlinks, fmt("%s/%s", p->lib_dir, name), fmt("%s/%s", LIB_SUBDIR, name), err,
                   errlen);
    }
    if (is_file(path)) {
        char real[PATH_MAX];
        if (!realpath(path, real))
            snprintf(real, sizeof real, "%s", path);
        return add(p->files, &p->nfiles, strdup(real), fmt("%s/%s", p->lib_dir, name), err, errlen);
    }
    return 0;
}

/* inject.py's _capability: NVML comes with utility, every other library with compute. */
static unsigned library_capability(const char *name)
{
    static const char *const utility[] = {FG_UTILITY_LIBRARIES};
    int versioned;
    size_t base = split_so(name, &versioned);
    for (size_t i = 0; base && i < sizeof utility / sizeof utility[0]; i++)
        if (strlen(utility[i]) == base && !strncmp(name, utility[i], base))
            return capability_bit(FG_UTILITY);
    return capability_bit(FG_COMPUTE);
}

int fg_plan_make(fg_plan *p, fg_root *root, const char *native_lib_dir, const char *nvidia_smi, const char *table,
                 const char *catalog, const char *state_dir, const unsigned *minors, unsigned device_count,
                 unsigned caps, const char *driver, char *err, size_t errlen)
{
    fg_pair soname_of[8];
    size_t nsoname = 0;
    int utility = !!(caps & capability_bit(FG_UTILITY)), compute = !!(caps & capability_bit(FG_COMPUTE));
    snprintf(p->lib_dir, sizeof p->lib_dir, "/usr/lib");
    for (size_t i = 0; i < sizeof GLIBC_DIRS / sizeof GLIBC_DIRS[0]; i++) {
        char probe[128];
        snprintf(probe, sizeof probe, "/%s/libc.so.6", GLIBC_DIRS[i]);
        if (fg_root_exists(root, probe)) {
            snprintf(p->lib_dir, sizeof p->lib_dir, "/%s", GLIBC_DIRS[i]);
            break;
        }
    }
    char **libs = NULL;
    size_t nlibs = 0;
    DIR *d = opendir(native_lib_dir);
    if (d) {
        size_t cap = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            /* Only what the granted capabilities bring (and the catalog). */
            if (strcmp(e->d_name, FG_CATALOG_TABLE_NAME) && !(caps & library_capability(e->d_name)))
                continue;
            if (nlibs == cap) {
                cap = cap ? cap * 2 : 64;
                char **grown = realloc(libs, cap * sizeof *libs);
                if (!grown) {
                    closedir(d);
                    snprintf(err, errlen, "out of memory");
                    return -1;
                }
                libs = grown;
            }
            libs[nlibs++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(libs, nlibs, sizeof *libs, cmp_name);
    }
    char native[PATH_MAX] = "";
    if (nlibs && !realpath(native_lib_dir, native))
        snprintf(native, sizeof native, "%s", native_lib_dir);
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/%s", p->lib_dir, LIB_SUBDIR);
    char **inside = calloc(nlibs + 1, sizeof *inside);
    size_t ninside = 0;
    int rc = -1;
    int has_catalog = 0;
    for (size_t i = 0; i < nlibs; i++) {
        has_catalog |= !strcmp(libs[i], FG_CATALOG_TABLE_NAME);
        int versioned;
        if (!split_so(libs[i], &versioned))
            continue;
        mode_t mode = lstat_mode(native_lib_dir, libs[i]);
        if (S_ISLNK(mode)) {
            char path[PATH_MAX], target[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", native_lib_dir, libs[i]);
            ssize_t n = readlink(path, target, sizeof target - 1);
            target[n > 0 ? n : 0] = '\0';
            if (n > 0 && bsearch(&(const char *){target}, libs, nlibs, sizeof *libs, cmp_name)) {
                if (add(p->links, &p->nlinks, fmt("%s/%s", p->lib_dir, libs[i]), strdup(target), err, errlen))
                    goto out;
                continue;
            }
        }
        if (place(p, native_lib_dir, libs[i], mode, inside, &ninside, driver, soname_of, &nsoname, err, errlen))
            goto out;
    }
    /* Development links (libnvidia-ml.so, libcuda.so) for sonames reached through the folder mount or mounted
     * as files, in sorted order of those destinations. */
    size_t ncand = 0;
    char **cand = calloc(p->nlinks + p->nfiles + 1, sizeof *cand);
    for (size_t i = 0; i < p->nlinks; i++)
        if (!strncmp(p->links[i].b, LIB_SUBDIR "/", sizeof LIB_SUBDIR))
            cand[ncand++] = p->links[i].a;
    for (size_t i = 0; i < p->nfiles; i++)
        cand[ncand++] = p->files[i].b;
    qsort(cand, ncand, sizeof *cand, cmp_name);
    for (size_t i = 0; i < ncand; i++) {
        if (i && !strcmp(cand[i], cand[i - 1]))
            continue;
        const char *slash = strrchr(cand[i], '/');
        const char *name = slash + 1;
        int versioned = 0;
        size_t base_len = split_so(name, &versioned);
        if (!base_len || !versioned)
            continue;
        char base_name[256];
        snprintf(base_name, sizeof base_name, "%.*s", (int)base_len, name);
        if (!driver_library(name, base_len))
            continue;
        char base[PATH_MAX];
        snprintf(base, sizeof base, "%.*s/%s", (int)(slash - cand[i]), cand[i], base_name);
        if (taken(p, base))
            continue;
        const char *target = name;
        for (size_t k = 0; k < nsoname; k++)
            if (!strcmp(soname_of[k].a, cand[i]))
                target = soname_of[k].b;
        if (add(p->links, &p->nlinks, strdup(base), strdup(target), err, errlen)) {
            free(cand);
            goto out;
        }
    }
    free(cand);
    if (has_catalog && (utility || compute) &&
        place(p, native_lib_dir, FG_CATALOG_TABLE_NAME, lstat_mode(native_lib_dir, FG_CATALOG_TABLE_NAME), inside,
              &ninside, NULL, soname_of, &nsoname, err, errlen))
        goto out;
    if (ninside && add(p->lib_dirs, &p->nlib_dirs, strdup(native), strdup(sub), err, errlen))
        goto out;
    int nvml = 0;
    for (size_t i = 0; i < p->nlinks; i++) {
        const char *s = strrchr(p->links[i].a, '/');
        nvml |= !strcmp(s ? s + 1 : p->links[i].a, "libnvidia-ml.so.1");
    }
    for (size_t i = 0; i < p->nfiles; i++) {
        const char *s = strrchr(p->files[i].b, '/');
        nvml |= !strcmp(s ? s + 1 : p->files[i].b, "libnvidia-ml.so.1");
    }
    if (utility && !nvml)
        p->notes[p->nnotes++] = fmt("no libnvidia-ml.so.1 in %s%s: NVML not injected (run `make`)", native_lib_dir, "");
    if (utility && is_file(nvidia_smi)) {
        if (add(p->files, &p->nfiles, strdup(nvidia_smi), strdup(FG_CONTAINER_NVIDIA_SMI), err, errlen))
            goto out;
    } else if (utility) {
        p->notes[p->nnotes++] = fmt("no nvidia-smi at %s%s: not injected (run `make`)", nvidia_smi, "");
    }
    if (add(p->files, &p->nfiles, strdup(table), strdup(FG_CONTAINER_DEVICE_TABLE), err, errlen))
        goto out;
    if (is_file(catalog) && add(p->files, &p->nfiles, strdup(catalog), strdup(FG_CONTAINER_CATALOG_TABLE), err,
                                errlen))
        goto out;
    if (add(p->dirs, &p->ndirs, strdup(state_dir), strdup(FG_CONTAINER_DIR), err, errlen))
        goto out;
    if (device_count + 3 > FG_PLAN_MAX) {
        snprintf(err, errlen, "too many devices");
        goto out;
    }
    p->nodes[p->nnodes++] = (fg_node){strdup("/dev/nvidiactl"), NVIDIA_MAJOR, NVIDIACTL_MINOR};
    if (compute) {
        p->nodes[p->nnodes++] = (fg_node){strdup("/dev/nvidia-uvm"), UVM_MAJOR, 0};
        p->nodes[p->nnodes++] = (fg_node){strdup("/dev/nvidia-uvm-tools"), UVM_MAJOR, 1};
    }
    for (unsigned i = 0; i < device_count; i++) { /* the host's minor numbers */
        char node[32];
        snprintf(node, sizeof node, "/dev/nvidia%u", minors[i]);
        p->nodes[p->nnodes++] = (fg_node){strdup(node), NVIDIA_MAJOR, (int)minors[i]};
    }
    rc = 0;
out:
    for (size_t k = 0; k < nsoname; k++)
        free(soname_of[k].a);
    free(inside);
    for (size_t i = 0; i < nlibs; i++)
        free(libs[i]);
    free(libs);
    return rc;
}

int fg_plan_prepare(const fg_plan *p, fg_root *root, char *err, size_t errlen)
{
    for (size_t i = 0; i < p->ndirs + p->nlib_dirs; i++) {
        const char *dest = i < p->ndirs ? p->dirs[i].b : p->lib_dirs[i - p->ndirs].b;
        if (fg_root_dir_target(root, dest, err, errlen) != 0)
            return -1;
    }
    /* Files that land inside a mounted folder (the tables in /run/fakegpu) need no target in the image. */
    for (size_t i = 0; i < p->nfiles; i++) {
        int inside = 0;
        for (size_t k = 0; k < p->ndirs; k++) {
            size_t n = strlen(p->dirs[k].b);
            while (n && p->dirs[k].b[n - 1] == '/')
                n--;
            inside |= !strncmp(p->files[i].b, p->dirs[k].b, n) && p->files[i].b[n] == '/';
        }
        if (!inside && fg_root_file_target(root, p->files[i].b, err, errlen))
            return -1;
    }
    for (size_t i = 0; i < p->nlinks; i++)
        if (fg_root_symlink(root, p->links[i].a, p->links[i].b, err, errlen))
            return -1;
    return 0;
}
