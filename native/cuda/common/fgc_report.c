#include "fgc_report.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

const char *fgc_parts_dir(void)
{
    static __thread char dir[1024];
    const char *base = getenv("FAKEGPU_REPORT_DIR");
    if (!base || !*base)
        return "";
    snprintf(dir, sizeof dir, "%s/.fakegpu-native-%d.parts", base, (int)getpid());
    return dir;
}

FILE *fgc_part_open(const char *name)
{
    const char *dir = fgc_parts_dir();
    if (!*dir)
        return NULL;
    mkdir(getenv("FAKEGPU_REPORT_DIR"), 0755); /* best effort: the folder is usually there */
    mkdir(dir, 0700);
    char tmp[1400];
    snprintf(tmp, sizeof tmp, "%s/%s.json.tmp", dir, name);
    return fopen(tmp, "w");
}

void fgc_part_close(FILE *f, const char *name)
{
    if (!f)
        return;
    char tmp[1400], path[1400];
    const char *dir = fgc_parts_dir();
    snprintf(tmp, sizeof tmp, "%s/%s.json.tmp", dir, name);
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    if (fclose(f) == 0)
        rename(tmp, path);
    else
        unlink(tmp);
}

void fgc_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* Defined in libcuda only (driver/report.c): merge every part into the process report. Weak, so the other
 * libraries, which carry this same file, link without it. */
FG_HIDDEN void fgd_report_merge(void) __attribute__((weak));

__attribute__((destructor)) static void at_exit(void)
{
    if (!*fgc_parts_dir())
        return;
    fgc_unsup_write_part();
    if (fgd_report_merge)
        fgd_report_merge();
}
