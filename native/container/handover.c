/* The hand-over to the Python runtime, the reference implementation: whatever fakegpu-create does not handle
 * exactly as Python would, it hands over (execs Python with the same arguments) before changing anything. */
#include "handover.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runc_args.h"

static const char *g_python, *g_pycode;
static int g_debug;

void fg_handover_init(const char *python, const char *pycode, int debug)
{
    g_python = python;
    g_pycode = pycode;
    g_debug = debug;
}

/* Exec the Python runtime: the reference implementation decides. The reason goes to stderr only under
 * FAKEGPU_DEBUG: runc folds a runtime's stderr into docker's error, and Python may well succeed. */
void fg_defer(const char *fmt, ...)
{
    if (g_debug) {
        va_list ap;
        va_start(ap, fmt);
        fputs("fakegpu-create: handing over to Python: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    if (!g_python || !g_pycode) {
        fprintf(stderr, "fakegpu-create: no Python runtime to hand over to\n");
        exit(1);
    }
    char **argv = calloc((size_t)fg_runc_argc + 6, sizeof *argv);
    if (!argv)
        exit(1);
    int n = 0;
    argv[n++] = (char *)g_python;
    argv[n++] = "-I";
    argv[n++] = "-S";
    argv[n++] = "-c";
    argv[n++] = (char *)g_pycode;
    for (int i = 0; i < fg_runc_argc; i++)
        argv[n++] = fg_runc_argv[i];
    argv[n] = NULL;
    execv(g_python, argv);
    fprintf(stderr, "fakegpu-create: cannot exec %s: %s\n", g_python, strerror(errno));
    exit(126);
}
