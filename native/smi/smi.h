/* nvidia-smi on top of libnvidia-ml: shared declarations of the views. Output goes to stdout, errors too,
 * because that is where the real tool prints them and scripts parse it. */
#ifndef SMI_H
#define SMI_H

#include <stddef.h>

#pragma GCC visibility push(default)
#include <nvml.h>
#pragma GCC visibility pop

/* nvidia-smi's exit codes are NVML's return codes (man nvidia-smi, RETURN VALUE). */
enum {
    SMI_OK = 0,
    SMI_EXIT_ARGS = 2,
    SMI_EXIT_NOT_FOUND = 6,
    SMI_EXIT_GPU_LOST = 15,
    SMI_EXIT_OTHER = 255,
};

#define SMI_MAX_GPUS 64

typedef struct {
    unsigned count;
    nvmlDevice_t dev[SMI_MAX_GPUS];
    unsigned index[SMI_MAX_GPUS];
    unsigned lost; /* selected GPUs NVML reports lost: announced, left out of the views */
} smi_gpus;

/* Parsed --format=csv[,noheader][,nounits]. */
typedef struct {
    int csv, noheader, nounits;
} smi_format;

/* gpus.c: selection by -i (indices, UUIDs, PCI bus ids, serials); returns 0 or an exit code. A lost GPU gets
 * the driver's "Unable to determine the device handle" line here, before any view prints. */
int smi_select(const char *ids, smi_gpus *out);
void smi_now(char *buf, size_t len, int csv_style);

/* What both -q reports open with: the time, the driver and its CUDA version ("13.0"), the GPUs attached. */
typedef struct {
    char timestamp[64], driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], cuda[16];
    unsigned attached;
} smi_system;
void smi_system_info(smi_system *s);
/* Is the reported driver this version or later (580, 159, 4 for 580.159.04)? Layouts and messages follow it. */
int smi_driver_at_least(int major, int minor, int patch);

/* display.c: -d TYPE,... as a mask (0: the whole report); returns 0, or -1 for an unknown type. Does the mask
 * show the report's top-level section named (as in -q -x) `section`? */
int smi_display_parse(const char *list, unsigned *mask);
int smi_display_shows(unsigned mask, const char *section);

/* Views; each returns an exit code. */
int smi_view_default(const smi_gpus *g);
int smi_view_list(const smi_gpus *g);
void smi_gpu_line(const smi_gpus *g, unsigned k); /* "GPU 0: NAME (UUID: GPU-...)" */
int smi_view_query(const smi_gpus *g, unsigned display);
int smi_view_query_xml(const smi_gpus *g);
int smi_view_topo(const smi_gpus *g);
int smi_view_nvlink_status(const smi_gpus *g);
/* monitor.c: dmon and pmon, count samples (0: until killed) delay_s seconds apart. */
int smi_view_dmon(const smi_gpus *g, unsigned count, unsigned delay_s);
int smi_view_pmon(const smi_gpus *g, unsigned count, unsigned delay_s);
/* nvidia-smi mig: one report or change (the GPU instance ones, then the compute instance ones, as main.c's flag
 * tables list them), with the -gi/-ci ID lists and the -cgi/-cci profile list (NULL: not given). */
typedef enum {
    SMI_MIG_LGI, SMI_MIG_LGIP, SMI_MIG_LGIPP, SMI_MIG_CGI, SMI_MIG_DGI,
    SMI_MIG_LCI, SMI_MIG_LCIP, SMI_MIG_LCIPP, SMI_MIG_CCI, SMI_MIG_DCI
} smi_mig_op;
typedef struct {
    smi_mig_op op;
    const char *gi, *ci, *profiles;
} smi_mig_args;
int smi_view_mig(const smi_gpus *g, const smi_mig_args *a);

/* mig.c: what the MIG views share. MIG mode on? The MIG device handles (by index, the slots the layout fills). */
int smi_mig_on(nvmlDevice_t d);
unsigned smi_mig_devices(nvmlDevice_t d, nvmlDevice_t *out, unsigned max);
/* Is id in the comma list (-gi 1,5)? A NULL list holds every id. */
int smi_id_listed(const char *list, unsigned id);
/* The board's GPU instance profiles in the order -lgip lists them; the count. */
unsigned smi_gi_profiles(nvmlDevice_t d, nvmlGpuInstanceProfileInfo_v2_t *out, unsigned max);
/* The GPU instances in the order -lgi lists them (by profile as -lgip, then by ID); the count. */
unsigned smi_gpu_instances(nvmlDevice_t d, nvmlGpuInstance_t *out, nvmlGpuInstanceInfo_t *info, unsigned max);
/* The name column of the mig tables: 16 wide, wider for a board with a longer profile name. */
int smi_mig_name_width(nvmlDevice_t d);

/* A table row built by column: '|' at both ends, text placed left-aligned at a column or right-aligned to end
 * before one (what the real tables' columns line up on). */
typedef struct {
    char s[224];
    int width;
} smi_row;
void smi_row_init(smi_row *r, int width);
void smi_row_left(smi_row *r, int col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void smi_row_right(smi_row *r, int end, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void smi_row_print(const smi_row *r);
void smi_rule(int width, char fill); /* '-': "+---+", '=': "|===|" */
void smi_row_text(int width, const char *text);
/* One cell of a report's heading: its column, moved right by the name column's extra width when `shifts`. */
typedef struct {
    int col, shifts;
    const char *text;
} smi_cell;
#define SMI_ROW_END {0, 0, NULL}
#define SMI_HEADING_END {-1, 0, NULL}
/* A mig report's heading: the rule, the title, each row of cells (SMI_ROW_END ends one, SMI_HEADING_END the
 * last), and the '=' rule under it. */
void smi_heading(int width, int shift, const char *title, const smi_cell *cells);

/* mig_list.c: -lgi, -lci and the MIG device lines of -L; mig_profiles.c: -lgip, -lgipp, -lcip; mig_change.c:
 * -cgi, -dgi, -cci, -dci. Each takes the MIG-enabled GPUs of the selection. */
int smi_mig_lgi(const smi_gpus *g);
int smi_mig_lci(const smi_gpus *g, const smi_mig_args *a);
void smi_mig_list_lines(nvmlDevice_t d);
int smi_mig_lgip(const smi_gpus *g);
int smi_mig_lgipp(const smi_gpus *g);
int smi_mig_lcip(const smi_gpus *g, const smi_mig_args *a);
int smi_mig_change(const smi_gpus *g, const smi_mig_args *a);
/* view_mig.c: the default view's "MIG devices:" table, when a GPU shown is in MIG mode. */
void smi_mig_table(const smi_gpus *g, int branch);
int smi_query_gpu(const smi_gpus *g, const char *fields, const smi_format *fmt);
int smi_query_apps(const smi_gpus *g, const char *fields, const smi_format *fmt);
int smi_help_query_gpu(void);
int smi_help_query_apps(void);
void smi_help(void);

/* words.c */
const char *smi_enabled(int on);
const char *smi_yes_no(int yes);
const char *smi_brand_name(nvmlBrandType_t brand);
const char *smi_architecture_name(nvmlDeviceArchitecture_t arch);
const char *smi_virtualization_name(nvmlGpuVirtualizationMode_t mode);
const char *smi_compute_mode_name(nvmlComputeMode_t mode);

/* xml_out.c: elements one a line, indented by tabs (depth 0 is the root); text is escaped. */
void smi_xml_open(int depth, const char *tag);
void smi_xml_close(int depth, const char *tag);
void smi_xml_leaf(int depth, const char *tag, const char *text);
void smi_xml_text(int depth, const char *text);
void smi_xml_escaped(const char *text);

/* The -q report as rows in document order, one table for its text (-q) and XML (-q -x) forms, which list the same
 * facts in the same order (a real H200's q.txt and qx.txt, driver 580.159.04). A row is a leaf (value), an element
 * whose children code writes (tree for XML, text for -q), or, with neither, a section holding the rows after it
 * that are one level deeper. tag is the XML element, label the text key or title (NULL: XML only). A value NVML cannot give prints N/A where NVML says NOT_SUPPORTED and NVML's own words otherwise, as real
 * nvidia-smi does ("Requested functionality has been deprecated", "Insufficient Permissions"). */
typedef struct smi_report_row smi_report_row;
typedef nvmlReturn_t (*smi_row_value)(nvmlDevice_t d, int arg, char *out, unsigned len);
typedef void (*smi_row_tree)(nvmlDevice_t d, int depth);
typedef void (*smi_row_lines)(nvmlDevice_t d, const smi_report_row *row, int depth);
typedef int (*smi_row_when)(nvmlDevice_t d);
enum {
    SMI_ROW_ON_REQUEST = 1, /* in -q only when -d names its section (supported clocks, samples, ...) */
    SMI_ROW_HEX = 2,        /* -q writes the value with 0x before it; the XML without */
    SMI_ROW_DEEPER = 4,     /* -q indents it one level deeper than the XML nests it */
    SMI_ROW_TEXT_ONLY = 8,  /* -q only; its tag names it for -d (the samples sections) */
};
struct smi_report_row {
    int level;
    const char *tag, *label;
    smi_row_value value;
    int arg;
    smi_row_tree tree;
    smi_row_lines text;
    unsigned flags;
    unsigned since;    /* the first driver that prints it, SMI_DRIVER(580, 159, 4); 0: every one */
    smi_row_when when; /* the board has it (NULL: every board) */
};
#define SMI_DRIVER(major, minor, patch) ((unsigned)(major) * 1000000u + (unsigned)(minor) * 1000u + (unsigned)(patch))

/* report.c: the two forms of one GPU's rows; mask is -d's (0: the whole report), width the text's key column. */
void smi_report_xml(nvmlDevice_t d, const smi_report_row *rows, size_t n, int depth);
void smi_report_text(nvmlDevice_t d, const smi_report_row *rows, size_t n, unsigned mask);
/* A text key and its value, the key padded to the report's column (55 from 580 on, 42 before). */
void smi_text_kv(int depth, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same with the key padded to a column of its own (process entries keep 42 on 580). */
void smi_text_kv_at(int width, int depth, const char *key, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void smi_text_section(int depth, const char *title);
/* What a report prints for a failed NVML call. */
const char *smi_report_error(nvmlReturn_t rc);

/* report_rows.c: one GPU's rows. */
void smi_report_gpu_xml(nvmlDevice_t d, int depth);
void smi_report_gpu_text(nvmlDevice_t d, unsigned mask);
/* view_query.c: what -q writes by code (MIG devices, processes, supported clocks, samples). */
void smi_text_mig_devices(nvmlDevice_t d, const smi_report_row *row, int depth);
void smi_text_processes(nvmlDevice_t d, const smi_report_row *row, int depth);
void smi_text_supported_clocks(nvmlDevice_t d, const smi_report_row *row, int depth);
void smi_text_none(nvmlDevice_t d, const smi_report_row *row, int depth);
void smi_text_samples(nvmlDevice_t d, const smi_report_row *row, int depth);

/* Memory in whole MiB as nvidia-smi rounds it: up. A real H200 (580.159.04) shows NVML's 644939776 reserved bytes
 * (615.06 MiB) as 616 MiB and 150109880320 free bytes (143155.94 MiB) as 143156 MiB (tests/data/gpu/h200/smi). */
static inline unsigned long long smi_mib(unsigned long long bytes) { return (bytes + (1ull << 20) - 1) >> 20; }

#endif
