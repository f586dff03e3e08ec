/* runc's command line as fakegpu-create received it: the same rules as fakegpu_hook/runtime.py's find_command,
 * find_bundle and _log_path, and errors written where runc's caller looks for them. */
#include "runc_args.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fg_contract.h" /* generated from hook/fakegpu_hook/contract.py */

int fg_runc_argc;
char **fg_runc_argv;

static int global_with_value(const char *a)
{
    static const char *opts[] = {FG_RUNC_OPTIONS_WITH_VALUE};
    const char *name = a[1] == '-' ? a + 2 : a + 1;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strcmp(name, opts[i]))
            return 1;
    return 0;
}

int find_command(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            return i + 1 < argc ? i + 1 : -1;
        if (a[0] == '-') {
            if (!strchr(a, '=') && global_with_value(a))
                i++;
            continue;
        }
        return i;
    }
    return -1;
}

const char *option_value(int argc, char **argv, int i, const char *opt)
{
    size_t n = strlen(opt);
    if (!strcmp(argv[i], opt) && i + 1 < argc)
        return argv[i + 1];
    if (!strncmp(argv[i], opt, n) && argv[i][n] == '=')
        return argv[i] + n + 1;
    return NULL;
}

void report_error(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakegpu-container-runtime: %s\n", msg);
    const char *path = NULL, *format = "text";
    for (int i = 0; i < fg_runc_argc; i++) {
        const char *v;
        if ((v = option_value(fg_runc_argc, fg_runc_argv, i, "--log")))
            path = v;
        if ((v = option_value(fg_runc_argc, fg_runc_argv, i, "--log-format")))
            format = v;
    }
    if (!path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    if (!strcmp(format, "json")) {
        /* containerd shows the last JSON error line it finds in runc's log. */
        char stamp[32];
        time_t now = time(NULL);
        struct tm tm;
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
        fputs("{\"level\": \"error\", \"msg\": \"fakegpu: ", f);
        for (const unsigned char *c = (const unsigned char *)msg; *c; c++) {
            if (*c == '"' || *c == '\\')
                fprintf(f, "\\%c", *c);
            else if (*c < 0x20)
                fprintf(f, "\\u%04x", *c);
            else
                fputc(*c, f);
        }
        fprintf(f, "\", \"time\": \"%s\"}\n", stamp);
    } else {
        fprintf(f, "fakegpu: %s\n", msg);
    }
    fclose(f);
}

void exec_runc(const char *low, const char *name)
{
    char **argv = calloc((size_t)fg_runc_argc + 2, sizeof *argv);
    if (argv) {
        argv[0] = (char *)name;
        memcpy(argv + 1, fg_runc_argv, (size_t)fg_runc_argc * sizeof *argv);
        execv(low, argv);
    }
}
