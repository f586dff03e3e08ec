/* nvidia-smi: argument parsing, NVML start-up and its failures, the -l loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fg_devices.h"
#include "smi.h"

typedef enum {
    CMD_DEFAULT,
    CMD_LIST,
    CMD_QUERY,
    CMD_TOPO,
    CMD_NVLINK_STATUS,
    CMD_MIG,
    CMD_QUERY_GPU,
    CMD_QUERY_APPS,
    CMD_HELP_QUERY_GPU,
    CMD_HELP_QUERY_APPS,
    CMD_DMON,
    CMD_PMON
} cmd_t;

typedef struct {
    cmd_t cmd;
    const char *ids;
    const char *fields;
    const char *format;
    int xml;
    smi_mig_args mig;
    const char *display; /* -d */
    unsigned display_mask;
    double loop_s;
    unsigned monitor_count, monitor_delay_s; /* dmon/pmon -c, -d */
    const char *unknown; /* the first argument that is no option at all */
} opts_t;

/* How parsing failed: options that exist but do not go together, an argument that is no option, or a -d list
 * with a type the driver does not know. Each has its own words and status on a real 580 driver
 * (tests/data/gpu/h200/smi: err_flag.txt and err_dflag.txt, exit_status.tsv). */
enum { PARSE_OK = 0, PARSE_COMBINATION = -1, PARSE_UNKNOWN = -2, PARSE_DISPLAY = -3 };

static int bad_args(const opts_t *o, int why)
{
    if (why == PARSE_UNKNOWN) {
        printf("ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n\n", o->unknown);
        return SMI_EXIT_OTHER;
    }
    if (why == PARSE_DISPLAY) {
        printf("Failed to parse --display/-d flags\n");
        return SMI_EXIT_ARGS;
    }
    printf("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n");
    return SMI_EXIT_ARGS;
}

/* "--name=value", or "--name value" / "-n value"; returns the value or NULL. */
static const char *option_value(int argc, char **argv, int *i, const char *arg, const char *long_name)
{
    size_t n = strlen(long_name);
    if (!strncmp(arg, long_name, n) && arg[n] == '=')
        return arg + n + 1;
    if (*i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int is_opt(const char *arg, const char *short_name, const char *long_name)
{
    size_t n = strlen(long_name);
    return (short_name && !strcmp(arg, short_name)) || !strcmp(arg, long_name) ||
           (!strncmp(arg, long_name, n) && arg[n] == '=');
}

static int parse(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            smi_help();
            exit(SMI_OK);
        } else if (!strcmp(a, "topo") && i == 1) {
            if (i + 1 >= argc || (strcmp(argv[i + 1], "-m") && strcmp(argv[i + 1], "--matrix")))
                return -1;
            o->cmd = CMD_TOPO;
            i++;
        } else if (!strcmp(a, "nvlink") && i == 1) {
            /* Of nvlink's reports, the link status (-s); capabilities, counters and errors are not modelled. */
            if (i + 1 >= argc || (strcmp(argv[i + 1], "-s") && strcmp(argv[i + 1], "--status")))
                return -1;
            o->cmd = CMD_NVLINK_STATUS;
            i++;
        } else if ((!strcmp(a, "dmon") || !strcmp(a, "pmon")) && i == 1) {
            /* -c samples, -d seconds between them (1 by default), -i GPUs; the metric choices (-s) are not modelled */
            o->cmd = !strcmp(a, "dmon") ? CMD_DMON : CMD_PMON;
            o->monitor_delay_s = 1;
            for (i++; i < argc; i++) {
                const char *m = argv[i];
                char *end = NULL;
                if ((!strcmp(m, "-c") || !strcmp(m, "-d")) && i + 1 < argc) {
                    unsigned long x = strtoul(argv[++i], &end, 10);
                    if (!*argv[i] || *end || x > 86400)
                        return -1;
                    *(!strcmp(m, "-c") ? &o->monitor_count : &o->monitor_delay_s) = (unsigned)x;
                } else if (is_opt(m, "-i", "--id")) {
                    if (!(o->ids = option_value(argc, argv, &i, m, "--id")))
                        return -1;
                } else {
                    return -1;
                }
            }
        } else if (!strcmp(a, "mig") && i == 1) {
            /* One report or change, then -i/--id (GPUs), -gi/--gpu-instance-id, -ci/--compute-instance-id,
             * -C/--default-compute-instance, -gip/-cip (profile ids) with their values. */
            static const char *const gpu_ops[] = {"-lgi", "--list-gpu-instances", "-lgip",
                                                   "--list-gpu-instance-profiles", "-lgipp",
                                                   "--list-gpu-instance-possible-placements", "-cgi",
                                                   "--create-gpu-instance", "-dgi", "--destroy-gpu-instance"};
            static const char *const ci_ops[] = {"-lci", "--list-compute-instances", "-lcip",
                                                  "--list-compute-instance-profiles", "-lcipp",
                                                  "--list-compute-instance-possible-placements", "-cci",
                                                  "--create-compute-instance", "-dci", "--destroy-compute-instance"};
            int found = 0;
            for (i++; i < argc; i++) {
                const char *m = argv[i];
                int op = -1;
                /* The tables pair each short flag with its long one, in smi_mig_op order. */
                for (size_t k = 0; k < sizeof gpu_ops / sizeof *gpu_ops; k++)
                    if (!strcmp(m, gpu_ops[k]) || !strcmp(m, ci_ops[k]))
                        op = (int)(k / 2) + (!strcmp(m, ci_ops[k]) ? SMI_MIG_LCI : 0);
                if (op >= 0) {
                    if (found)
                        return -1;
                    found = 1;
                    o->mig.op = (smi_mig_op)op;
                    /* -cgi and -cci take their profiles as the next word */
                    if ((op == SMI_MIG_CGI || op == SMI_MIG_CCI) && i + 1 < argc && argv[i + 1][0] != '-')
                        o->mig.profiles = argv[++i];
                } else if (is_opt(m, "-i", "--id")) {
                    if (!(o->ids = option_value(argc, argv, &i, m, "--id")))
                        return -1;
                } else if (!strcmp(m, "-gi") || !strcmp(m, "--gpu-instance-id")) {
                    if (++i >= argc)
                        return -1;
                    o->mig.gi = argv[i];
                } else if (!strcmp(m, "-ci") || !strcmp(m, "--compute-instance-id")) {
                    if (++i >= argc)
                        return -1;
                    o->mig.ci = argv[i];
                } else if (!strcmp(m, "-gip") || !strcmp(m, "-cip")) {
                    if (++i >= argc)
                        return -1;
                } else if (!strcmp(m, "-C") || !strcmp(m, "--default-compute-instance")) {
                } else {
                    return -1;
                }
            }
            /* -cgi names what to create; -cci alone creates each GPU instance's default compute instance. */
            if (!found || (o->mig.op == SMI_MIG_CGI && !o->mig.profiles))
                return -1;
            o->cmd = CMD_MIG;
        } else if (!strcmp(a, "-L") || !strcmp(a, "--list-gpus")) {
            o->cmd = CMD_LIST;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--query")) {
            o->cmd = CMD_QUERY;
        } else if (!strcmp(a, "-x") || !strcmp(a, "--xml-format")) {
            o->xml = 1;
        } else if (is_opt(a, "-d", "--display")) {
            if (!(o->display = option_value(argc, argv, &i, a, "--display")))
                return -1;
        } else if (is_opt(a, "-i", "--id")) {
            if (!(o->ids = option_value(argc, argv, &i, a, "--id")))
                return -1;
        } else if (!strncmp(a, "-i", 2) && a[2]) {
            o->ids = a + 2; /* -i0 */
        } else if (is_opt(a, NULL, "--query-gpu")) {
            o->cmd = CMD_QUERY_GPU;
            if (!(o->fields = option_value(argc, argv, &i, a, "--query-gpu")))
                return -1;
        } else if (is_opt(a, NULL, "--query-compute-apps")) {
            o->cmd = CMD_QUERY_APPS;
            if (!(o->fields = option_value(argc, argv, &i, a, "--query-compute-apps")))
                return -1;
        } else if (is_opt(a, NULL, "--format")) {
            if (!(o->format = option_value(argc, argv, &i, a, "--format")))
                return -1;
        } else if (!strcmp(a, "--help-query-gpu")) {
            o->cmd = CMD_HELP_QUERY_GPU;
        } else if (!strcmp(a, "--help-query-compute-apps")) {
            o->cmd = CMD_HELP_QUERY_APPS;
        } else if (is_opt(a, "-l", "--loop") || is_opt(a, "-lms", "--loop-ms")) {
            int ms = !strcmp(a, "-lms") || !strncmp(a, "--loop-ms", 9);
            const char *v = strchr(a, '=') ? strchr(a, '=') + 1 : NULL;
            if (!v && i + 1 < argc && argv[i + 1][0] != '-')
                v = argv[++i];
            char *end = NULL;
            double x = v ? strtod(v, &end) : 5; /* the real default interval */
            if ((v && (*end || end == v)) || x <= 0)
                return -1;
            o->loop_s = ms ? x / 1000 : x;
        } else {
            o->unknown = a;
            return PARSE_UNKNOWN;
        }
    }
    /* XML is a form of the -q report only, and -d narrows the text report only, as on real nvidia-smi. */
    if (o->display && (o->cmd != CMD_QUERY || o->xml))
        return PARSE_COMBINATION;
    if (o->display && smi_display_parse(o->display, &o->display_mask) != 0)
        return PARSE_DISPLAY;
    return o->xml && o->cmd != CMD_QUERY ? PARSE_COMBINATION : PARSE_OK;
}

static int parse_format(const char *s, smi_format *f)
{
    memset(f, 0, sizeof *f);
    if (!s)
        return -1;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        if (!strcmp(t, "csv"))
            f->csv = 1;
        else if (!strcmp(t, "noheader"))
            f->noheader = 1;
        else if (!strcmp(t, "nounits"))
            f->nounits = 1;
        else
            return -1;
    }
    return f->csv ? 0 : -1;
}

/* NVML failed to start: the real tool's message, then ours saying why, since "driver" means little here. */
static int init_failed(nvmlReturn_t rc)
{
    static fg_devset probe;
    char why[512] = "";
    fg_devices_load(&probe, why, sizeof why);
    if (rc == NVML_ERROR_LIBRARY_NOT_FOUND || rc == NVML_ERROR_DRIVER_NOT_LOADED)
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
               "latest NVIDIA driver is installed and running.\n\n");
    else
        printf("Failed to initialize NVML: %s\n", nvmlErrorString(rc));
    if (why[0])
        fprintf(stderr, "fakegpu: %s\n", why);
    return rc == NVML_ERROR_LIBRARY_NOT_FOUND ? 9 : SMI_EXIT_OTHER;
}

static int view(const opts_t *o, const smi_format *fmt, const smi_gpus *g);

static int run_once(const opts_t *o, const smi_format *fmt)
{
    smi_gpus g;
    int rc = smi_select(o->ids, &g);
    if (rc == SMI_EXIT_GPU_LOST)
        return rc;
    if (rc == SMI_EXIT_NOT_FOUND) {
        /* An empty CSV query on a GPU-less box prints its header and nothing else; all else says so. */
        printf("No devices were found\n");
        return rc;
    }
    if (rc)
        return rc;
    int status = view(o, fmt, &g);
    /* The other GPUs are shown; the status is 15, the return code man nvidia-smi gives a lost GPU. */
    return status == SMI_OK && g.lost ? SMI_EXIT_GPU_LOST : status;
}

static int view(const opts_t *o, const smi_format *fmt, const smi_gpus *g)
{
    switch (o->cmd) {
    case CMD_LIST: return smi_view_list(g);
    case CMD_QUERY: return o->xml ? smi_view_query_xml(g) : smi_view_query(g, o->display_mask);
    case CMD_TOPO: return smi_view_topo(g);
    case CMD_NVLINK_STATUS: return smi_view_nvlink_status(g);
    case CMD_MIG: return smi_view_mig(g, &o->mig);
    case CMD_QUERY_GPU: return smi_query_gpu(g, o->fields, fmt);
    case CMD_QUERY_APPS: return smi_query_apps(g, o->fields, fmt);
    case CMD_DMON: return smi_view_dmon(g, o->monitor_count, o->monitor_delay_s);
    case CMD_PMON: return smi_view_pmon(g, o->monitor_count, o->monitor_delay_s);
    default: return smi_view_default(g);
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    int why = parse(argc, argv, &o);
    if (why != PARSE_OK)
        return bad_args(&o, why);
    if (o.cmd == CMD_HELP_QUERY_GPU)
        return smi_help_query_gpu();
    if (o.cmd == CMD_HELP_QUERY_APPS)
        return smi_help_query_apps();
    smi_format fmt = {0};
    if ((o.cmd == CMD_QUERY_GPU || o.cmd == CMD_QUERY_APPS) && parse_format(o.format, &fmt) != 0) {
        /* A real 580 driver: "Format modifier is not recognized." for --format=xml (err_format.txt). */
        if (o.format)
            printf("Format modifier is not recognized.\n");
        else
            printf("Missing --format option. Please run 'nvidia-smi -h' for help.\n\n");
        return SMI_EXIT_ARGS;
    }
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc != NVML_SUCCESS)
        return init_failed(rc);
    int status;
    for (;;) {
        status = run_once(&o, &fmt);
        fflush(stdout);
        if (o.loop_s <= 0 || status != SMI_OK)
            break;
        struct timespec ts = {.tv_sec = (time_t)o.loop_s, .tv_nsec = (long)((o.loop_s - (double)(time_t)o.loop_s) * 1e9)};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
    nvmlShutdown();
    return status;
}
