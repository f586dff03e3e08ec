/* The devices this process sees: from $FAKEGPU_DEVICE_TABLE, else $FAKEGPU_DEVICES resolved against the
 * catalog table exactly as fakegpu/devices/spec.py does (same grammar, same SHA-256 identities). */
#ifndef FG_DEVICES_H
#define FG_DEVICES_H

#include <stddef.h>

#include "fg_log.h"
#include "fg_mig.h"

#define FG_MAX_DEVICES 64 /* MAX_DEVICES in spec.py */
#define FG_MAX_MEM_CLOCKS 8
/* Input bounds, as spec.py's MAX_SPEC_LENGTH and MAX_SEED_LENGTH (bytes; a test compares the two files). */
#define FG_MAX_SPEC_LENGTH 1024
#define FG_MAX_SEED_LENGTH 128
/* What every GPU UUID starts with: UUID_PREFIX in fakegpu/devices/device.py. */
#define FG_UUID_PREFIX "GPU-"

/* The load model's figures for one board: the compiled catalog's telemetry.* (fakegpu/profiles/compile.py, from
 * profiles/load_model.yaml and the board's profile). native/nvml/model.c says what each does. */
typedef struct {
    double idle_w, active_idle_w, compute_w, memory_w, cap_w; /* draw: no process; a context; busy; the cap */
    double video_idle_mhz;                          /* the clocks otherwise: clock_graphics_min_mhz, clock_video_mhz */
    double idle_c, compute_c_per_w, memory_c_per_w; /* temperature: idle; steady rise per watt by kind */
    double gemm_tflops, copy_gb_s;                  /* achieved rates: how long native mode's work takes */
} fg_load_params;

typedef struct {
    unsigned index;
    char profile[64];
    char name[96];
    char uuid[48];
    char serial[24];
    char pci_bus_id[24]; /* 00000000:18:00.0 */
    unsigned pci_domain, pci_bus, pci_dev, pci_function;
    unsigned minor_number;
    char architecture[16];
    char segment[16];
    char chip[24];
    char memory_type[16];
    unsigned released;
    int cc_major, cc_minor;
    unsigned sm_count, cuda_cores;
    unsigned clock_base_mhz, clock_boost_mhz, clock_mem_mhz;
    unsigned clock_video_mhz;       /* max video clock */
    unsigned clock_graphics_min_mhz; /* lowest supported graphics clock */
    unsigned mem_clocks[FG_MAX_MEM_CLOCKS]; /* supported memory clocks, highest first */
    unsigned mem_clock_count;
    unsigned long long l2_bytes;
    unsigned long long mem_total, mem_reserved, cuda_total;
    unsigned mem_bus_width;
    double mem_bandwidth_gb_s;
    int ecc;
    int c2c; /* NVLink-C2C to a Grace CPU */
    unsigned row_remap_banks; /* 0: not known, the histogram is not answered */
    unsigned pci_device_id;    /* 0x20B2 */
    unsigned pci_subsystem_id; /* 0x147F10DE */
    unsigned pcie_gen, pcie_width;
    unsigned nvlink_links, nvlink_version;
    double nvlink_bandwidth_gb_s;
    unsigned power_default_mw, power_min_mw, power_max_mw;
    fg_load_params load;
    unsigned fans;
    unsigned temp_shutdown_c, temp_slowdown_c, temp_gpu_max_c, temp_mem_max_c; /* 0: no such limit */
    int mig_supported;
    unsigned mig_max_instances;
    fg_mig_board mig_board; /* the catalog's MIG profiles of this board (nprofiles 0: none known) */
    int mig_mode;           /* MIG mode on: the spec or table gave a layout (fakegpu/devices/mig.py) */
    unsigned mig_count;
    fg_mig_instance mig[FG_MIG_MAX_INSTANCES];
    int mig_slice; /* CUDA's view of one MIG instance (fg_devices_cuda_view): its GPU instance ID + 1; 0: a board */
} fg_device;

typedef struct {
    unsigned count;
    fg_device dev[FG_MAX_DEVICES];
    char spec[FG_MAX_SPEC_LENGTH + 1];
    char seed[FG_MAX_SEED_LENGTH + 1];
    char driver[16]; /* the table's driver= (fakegpu/devices/table.py), else empty */
    char source[512]; /* which file or spec the devices came from, for diagnostics */
} fg_devset;

enum {
    FG_DEV_OK = 0,
    FG_DEV_MISSING = 1, /* the table or catalog file is not there */
    FG_DEV_CORRUPT = 2, /* a file is there but is not a table we can use */
    FG_DEV_BADSPEC = 3, /* FAKEGPU_DEVICES does not parse or names an unknown profile */
};

/* Resolve the process's devices from the environment. Zero devices (no table, FAKEGPU_DEVICES unset, empty,
 * 'void' or 'none') is FG_DEV_OK with count 0: the container simply has no GPU. */
FG_HIDDEN int fg_devices_load(fg_devset *out, char *err, size_t errlen);

/* Resolve a spec against a catalog table file; used by fg_devices_load and the differential tests. */
FG_HIDDEN int fg_devices_from_spec(const char *spec, const char *seed, const char *catalog_path, fg_devset *out,
                                   char *err, size_t errlen);

/* Identity fields exactly as Device.create computes them. */
FG_HIDDEN void fg_identity(const char *seed, unsigned index, const char *profile_id, fg_device *d);

/* The driver version the device table this process reads names (its header's driver=, written by the container
 * runtime and `fakegpu run`): 1 with buf filled, else 0 (no table, no driver= or not a driver version). Reads
 * the header line only. */
FG_HIDDEN int fg_devices_table_driver(char *buf, size_t len);

/* The board's VBIOS version, "92.00.2B.00.02" (upper: as NVML and nvidia-smi print it) or "92.00.2b.00.02"
 * (the kernel driver's /proc/driver/nvidia spelling): one source, so every surface names the same VBIOS. */
FG_HIDDEN const char *fg_vbios_version(const fg_device *d, int upper, char *buf, size_t len);

/* The catalog path this process would use (env, baked-in path, next to the library). */
FG_HIDDEN const char *fg_catalog_path(char *buf, size_t len);

#endif
