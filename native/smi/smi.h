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

/* A report as rows in document order. A row is a leaf (value), an element whose children code writes (tree),
 * or, with neither, a section holding the rows after it that are one level deeper. A value that fails
 * prints N/A, as real nvidia-smi does. */
typedef nvmlReturn_t (*smi_xml_value)(nvmlDevice_t d, int arg, char *out, unsigned len);
typedef void (*smi_xml_tree)(nvmlDevice_t d, int depth);
typedef struct {
    int level;
    const char *tag;
    smi_xml_value value;
    int arg;
    smi_xml_tree tree;
} smi_xml_row;
void smi_xml_rows(nvmlDevice_t d, const smi_xml_row *rows, size_t n, int depth);

/* xml_gpu.c: one <gpu> element's children, at the given depth. */
void smi_xml_gpu(nvmlDevice_t d, int depth);

/* Memory in whole MiB as nvidia-smi rounds it: up. A real H200 (580.159.04) shows NVML's 644939776 reserved bytes
 * (615.06 MiB) as 616 MiB and 150109880320 free bytes (143155.94 MiB) as 143156 MiB (tests/data/gpu/h200/smi). */
static inline unsigned long long smi_mib(unsigned long long bytes) { return (bytes + (1ull << 20) - 1) >> 20; }

#endif
