/* The process report (common/fgc_report.h): libcuda is finalized after every other FakeGPU CUDA library, so its
 * exit merges their parts with its own facts (devices and memory) into $FAKEGPU_REPORT_DIR/fakegpu-native-<pid>.json,
 * written atomically, then removes the parts folder. The shape is fakegpu/reports/schemas/native-process.schema.json;
 * a section whose library never loaded or had nothing to say is written with zeros, so every key is always there. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgc_env.h"
#include "fgc_report.h"
#include "fgd_module.h"

#define REPORT_SCHEMA "fakegpu.native-process/v1"

FG_HIDDEN size_t fgd_live_allocations(void);
FG_HIDDEN void fgd_report_merge(void);

/* Copy part `name` into f; 0 if there is none. */
static int emit(FILE *f, const char *dir, const char *name)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    FILE *p = fopen(path, "r");
    if (!p)
        return 0;
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        fwrite(buf, 1, n, f);
    fclose(p);
    return 1;
}

static void gemm(FILE *f, const char *dir)
{
    static const char *const libs[] = {"cublas", "cublasLt"};
    unsigned long long calls[2] = {0}, flops[2] = {0};
    for (int i = 0; i < 2; i++)
        for (int major = 12; major <= 13; major++) { /* each CUDA major's library writes its own part */
            char path[1400];
            unsigned long long c, fl;
            snprintf(path, sizeof path, "%s/gemm-%s-%d.json", dir, libs[i], major);
            FILE *p = fopen(path, "r");
            if (p) {
                if (fscanf(p, "{\"calls\": %llu, \"flops\": %llu}", &c, &fl) == 2)
                    calls[i] += c, flops[i] += fl;
                fclose(p);
            }
        }
    fprintf(f, "{\"calls\": %llu, \"flops\": %llu, \"by_library\": {", calls[0] + calls[1], flops[0] + flops[1]);
    for (int i = 0; i < 2; i++)
        fprintf(f, "%s\"%s\": {\"calls\": %llu, \"flops\": %llu}", i ? ", " : "", libs[i], calls[i], flops[i]);
    fputs("}}", f);
}

static void process_name(FILE *f)
{
    char name[512] = "";
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, name, sizeof name - 1) : -1;
    if (fd >= 0)
        close(fd);
    for (ssize_t i = 0; i < n - 1; i++)
        if (!name[i])
            name[i] = ' ';
    name[n > 0 ? n : 0] = 0;
    fgc_json_string(f, name);
}

static void remove_parts(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            char part[1400];
            snprintf(part, sizeof part, "%s/%s", dir, e->d_name);
            unlink(part);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

FG_HIDDEN void fgd_graph_report(FILE *f);                    /* driver/graph.c */
FG_HIDDEN void fgd_kernels_report(FILE *f, const char *dir); /* driver/kernels_report.c */

void fgd_report_merge(void)
{
    const char *dir = fgc_parts_dir();
    if (!*dir)
        return;
    if (!fgd.loaded) { /* CUDA was never initialised: no devices to report, nothing to say */
        remove_parts(dir);
        return;
    }
    char path[1100], tmp[1200];
    snprintf(path, sizeof path, "%s/fakegpu-native-%d.json", getenv("FAKEGPU_REPORT_DIR"), (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "{\"schema\": \"" REPORT_SCHEMA "\", \"mode\": \"native\", \"memory_mode\": \"%s\", \"pid\": %d, "
               "\"process\": ",
            fgc_memory_accounting() ? "accounting" : "full", (int)getpid());
    process_name(f);
    fprintf(f, ",\n \"live_allocations\": %zu,\n \"devices\": [", fgd_live_allocations());
    for (unsigned i = 0; i < fgd.devs.count; i++) {
        const fgd_mem *m = &fgd.mem[i];
        fprintf(f, "%s\n  {\"index\": %u, \"name\": ", i ? "," : "", i);
        fgc_json_string(f, fgd.devs.dev[i].name);
        fputs(", \"uuid\": ", f);
        fgc_json_string(f, fgd.devs.dev[i].uuid);
        fprintf(f,
                ", \"context_bytes\": %llu, \"capacity_bytes\": %llu, \"used_bytes\": %llu, \"peak_bytes\": %llu, "
                "\"allocations\": %llu, \"frees\": %llu, \"active\": %s}",
                (unsigned long long)atomic_load(&m->context), fgd_capacity(m), (unsigned long long)atomic_load(&m->used),
                (unsigned long long)atomic_load(&m->peak), (unsigned long long)atomic_load(&m->allocs),
                (unsigned long long)atomic_load(&m->frees), atomic_load(&m->active) ? "true" : "false");
    }
    fputs("],\n \"kernels\": ", f);
    fgd_kernels_report(f, dir);
    fputs(",\n \"graphs\": ", f);
    fgd_graph_report(f);
    fputs(",\n \"device_reads\": ", f);
    fgd_written_report(f);
    fputs(",\n \"gemm\": ", f);
    gemm(f, dir);
    fputs(",\n \"collectives\": ", f);
    if (!emit(f, dir, "collectives"))
        fputs("{\"exchanged_calls\": 0, \"rank_local_calls\": 0, \"degraded_communicators\": 0, \"ops\": {}, "
              "\"calls\": 0, \"bytes\": 0}",
              f);
    fputs(",\n \"unsupported\": {", f);
    fgc_unsup_write_part(); /* libcuda's own, before the parts are read */
    DIR *d = opendir(dir);
    struct dirent *e;
    const char *sep = "";
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "unsupported-", 12) != 0 || len < 17 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
        fprintf(f, "%s\"%s\": ", sep, name + 12);
        emit(f, dir, name);
        sep = ", ";
    }
    fputs("}}\n", f);
    if (d)
        closedir(d);
    remove_parts(dir); /* merged */
    if (fclose(f) == 0)
        rename(tmp, path);
    else
        unlink(tmp);
}
