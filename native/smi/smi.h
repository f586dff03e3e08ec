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
    SMI_EXIT_OTHER = 255,
};

#define SMI_MAX_GPUS 64

typedef struct {
    unsigned count;
    nvmlDevice_t dev[SMI_MAX_GPUS];
    unsigned index[SMI_MAX_GPUS];
} smi_gpus;

/* Parsed --format=csv[,noheader][,nounits]. */
typedef struct {
    int csv, noheader, nounits;
} smi_format;

/* gpus.c: selection by -i (indices, UUIDs, PCI bus ids, serials); returns 0 or an exit code. */
int smi_select(const char *ids, smi_gpus *out);
void smi_now(char *buf, size_t len, int csv_style);

/* Views; each returns an exit code. */
int smi_view_default(const smi_gpus *g);
int smi_view_list(const smi_gpus *g);
int smi_view_query(const smi_gpus *g);
int smi_view_topo(const smi_gpus *g);
int smi_query_gpu(const smi_gpus *g, const char *fields, const smi_format *fmt);
int smi_query_apps(const smi_gpus *g, const char *fields, const smi_format *fmt);
int smi_help_query_gpu(void);
void smi_help(void);

/* Memory in whole MiB as nvidia-smi rounds it. */
static inline unsigned long long smi_mib(unsigned long long bytes) { return bytes >> 20; }

#endif
