#include "fg_devices.h"

#include <ctype.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fg_contract.h" /* generated from hook/fakegpu_hook/contract.py */
#include "fg_driver.h"
#include "fg_sha256.h"
#include "fg_table.h"

/* Same order as _BUS_NUMBERS in fakegpu/devices/device.py: the eight GPU slots of an HGX baseboard. */
static const unsigned BUS_NUMBERS[8] = {0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB};

void fg_identity(const char *seed, unsigned index, const char *profile_id, fg_device *d)
{
    /* Room for any seed the parser accepts (FG_MAX_SEED_LENGTH) and any profile id: never truncated, so
     * every device keeps its own identity. */
    char msg[FG_MAX_SEED_LENGTH + 256];
    int n = snprintf(msg, sizeof msg, "fakegpu:%s:%u:%s", seed, index, profile_id);
    if (n < 0 || (size_t)n >= sizeof msg)
        n = (int)strlen(msg);
    uint8_t h[32];
    fg_sha256(msg, (size_t)n, h);
    fg_uuid_text(FG_UUID_PREFIX, h, d->uuid, sizeof d->uuid);
    uint64_t v = 0;
    for (int i = 16; i < 24; i++)
        v = v << 8 | h[i];
    snprintf(d->serial, sizeof d->serial, "1%012" PRIu64, (uint64_t)(v % 1000000000000ULL));
    d->index = index;
    d->minor_number = index;
    d->pci_domain = index / 8;
    d->pci_bus = BUS_NUMBERS[index % 8];
    d->pci_dev = 0;
    d->pci_function = 0;
    snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "%08X:%02X:%02X.%X", d->pci_domain, d->pci_bus, d->pci_dev,
             d->pci_function);
}

/* ---- typed reads from a record ------------------------------------------------------------------ */

static int get_ull(const fg_record *r, const char *key, unsigned long long *out, int required, char *err,
                   size_t errlen)
{
    const char *v = fg_record_get(r, key);
    if (!v) {
        if (required)
            fg_seterr(err, errlen, "line %d lacks %s", r->line, key);
        return required ? -1 : 1;
    }
    char *end = NULL;
    int base = (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) ? 16 : 10;
    unsigned long long x = strtoull(v, &end, base);
    if (!*v || *end || v[0] == '-') {
        fg_seterr(err, errlen, "line %d: %s=%.40s is not a whole number", r->line, key, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int get_uint(const fg_record *r, const char *key, unsigned *out, int required, char *err, size_t errlen)
{
    unsigned long long x = 0;
    int rc = get_ull(r, key, &x, required, err, errlen);
    if (rc == 0) {
        if (x > 0xFFFFFFFFull) {
            fg_seterr(err, errlen, "line %d: %s is out of range", r->line, key);
            return -1;
        }
        *out = (unsigned)x;
    }
    return rc;
}

/* A comma-separated list of whole numbers (a profile's list, fakegpu/profiles/table.py); 1 when absent. */
static int get_uint_list(const fg_record *r, const char *key, unsigned *out, unsigned max, unsigned *count, char *err,
                         size_t errlen)
{
    const char *v = fg_record_get(r, key);
    *count = 0;
    if (!v)
        return 1;
    while (*v) {
        char *end = NULL;
        unsigned long x = strtoul(v, &end, 10);
        if (end == v || x > 0xFFFFFFFFul || (*end && *end != ',') || *count == max) {
            fg_seterr(err, errlen, "line %d: %s=%.40s is not a list of at most %u numbers", r->line, key, v, max);
            return -1;
        }
        out[(*count)++] = (unsigned)x;
        v = *end ? end + 1 : end;
    }
    return 0;
}

static int get_double(const fg_record *r, const char *key, double *out)
{
    const char *v = fg_record_get(r, key);
    if (!v)
        return 1;
    char *end = NULL;
    double x = strtod(v, &end);
    if (!*v || *end)
        return -1;
    *out = x;
    return 0;
}

static int get_str(const fg_record *r, const char *key, char *dst, size_t len, int required, char *err,
                   size_t errlen)
{
    const char *v = fg_record_get(r, key);
    if (!v) {
        if (required) {
            fg_seterr(err, errlen, "line %d lacks %s", r->line, key);
            return -1;
        }
        return 1;
    }
    fg_strlcpy(dst, v, len);
    return 0;
}

static unsigned watts_to_mw(double w) { return (unsigned)(w * 1000.0 + 0.5); }

/* The board's MIG slices and mig.gip.N profiles (fakegpu/profiles/table.py). */
static int fill_mig_board(const fg_record *r, fg_mig_board *b, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    if (get_uint(r, "mig.slices.compute", &b->compute_slices, 0, err, errlen) < 0 ||
        get_uint(r, "mig.slices.memory", &b->memory_slices, 0, err, errlen) < 0)
        return -1;
    if (b->memory_slices > FG_MIG_MAX_SLICES) {
        fg_seterr(err, errlen, "line %d: mig.slices.memory=%u; at most %d", r->line, b->memory_slices,
                  FG_MIG_MAX_SLICES);
        return -1;
    }
    for (unsigned i = 0;; i++) {
        char key[32];
        snprintf(key, sizeof key, "mig.gip.%u", i);
        const char *v = fg_record_get(r, key);
        if (!v)
            break;
        if (i == FG_MIG_MAX_PROFILES || fg_mig_parse_profile(v, &b->profiles[i])) {
            fg_seterr(err, errlen, "line %d: %s=%.60s is not a MIG profile we can use", r->line, key, v);
            return -1;
        }
        b->nprofiles = i + 1;
    }
    if (b->nprofiles && (!b->compute_slices || !b->memory_slices)) {
        fg_seterr(err, errlen, "line %d: MIG profiles without mig.slices", r->line);
        return -1;
    }
    return 0;
}

/* MIG mode on with this layout's instances. */
static int apply_mig(fg_device *d, const char *layout, char *err, size_t errlen)
{
    if (!d->mig_board.nprofiles) {
        fg_seterr(err, errlen, "%s has no MIG profile table in the catalog", d->name);
        return -1;
    }
    if (fg_mig_layout(&d->mig_board, d->name, layout, d->uuid, d->mig, &d->mig_count, err, errlen))
        return -1;
    d->mig_mode = 1;
    return 0;
}

/* telemetry.* of a compiled profile: every key is required (a table from before the load model is stale). */
static int fill_load(const fg_record *r, fg_load_params *p, char *err, size_t errlen)
{
    struct {
        const char *key;
        double *dst;
    } keys[] = {
        {"telemetry.idle_w", &p->idle_w},
        {"telemetry.active_idle_w", &p->active_idle_w},
        {"telemetry.compute_w", &p->compute_w},
        {"telemetry.memory_w", &p->memory_w},
        {"telemetry.cap_w", &p->cap_w},
        {"telemetry.video_idle_mhz", &p->video_idle_mhz},
        {"telemetry.idle_c", &p->idle_c},
        {"telemetry.compute_c_per_w", &p->compute_c_per_w},
        {"telemetry.memory_c_per_w", &p->memory_c_per_w},
        {"telemetry.gemm_tflops", &p->gemm_tflops},
        {"telemetry.copy_gb_s", &p->copy_gb_s},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (get_double(r, keys[i].key, keys[i].dst) != 0) {
            fg_seterr(err, errlen, "line %d: %s missing or not a number (run `make catalog`)", r->line, keys[i].key);
            return -1;
        }
    return 0;
}

/* Profile facts shared by device and catalog records. */
static int fill_profile(const fg_record *r, fg_device *d, char *err, size_t errlen)
{
    if (get_str(r, "name", d->name, sizeof d->name, 1, err, errlen) ||
        get_ull(r, "memory.total_bytes", &d->mem_total, 1, err, errlen))
        return -1;
    get_str(r, "architecture", d->architecture, sizeof d->architecture, 0, err, errlen);
    get_str(r, "segment", d->segment, sizeof d->segment, 0, err, errlen);
    get_str(r, "chip", d->chip, sizeof d->chip, 0, err, errlen);
    get_str(r, "memory.type", d->memory_type, sizeof d->memory_type, 0, err, errlen);

    const char *cc = fg_record_get(r, "compute_capability");
    if (!cc || sscanf(cc, "%d.%d", &d->cc_major, &d->cc_minor) != 2) {
        fg_seterr(err, errlen, "line %d: compute_capability missing or not MAJOR.MINOR", r->line);
        return -1;
    }
    struct {
        const char *key;
        unsigned *dst;
    } uints[] = {
        {"released", &d->released},
        {"sm_count", &d->sm_count},
        {"cuda_cores", &d->cuda_cores},
        {"clocks_mhz.base", &d->clock_base_mhz},
        {"clocks_mhz.boost", &d->clock_boost_mhz},
        {"clocks_mhz.memory", &d->clock_mem_mhz},
        {"clocks_mhz.video", &d->clock_video_mhz},
        {"clocks_mhz.graphics_min", &d->clock_graphics_min_mhz},
        {"memory.row_remap_banks", &d->row_remap_banks},
        {"thermal.shutdown_c", &d->temp_shutdown_c},
        {"thermal.slowdown_c", &d->temp_slowdown_c},
        {"thermal.gpu_max_c", &d->temp_gpu_max_c},
        {"thermal.memory_max_c", &d->temp_mem_max_c},
        {"memory.bus_width_bits", &d->mem_bus_width},
        {"pci.device_id", &d->pci_device_id},
        {"pci.subsystem_id", &d->pci_subsystem_id},
        {"pci.generation", &d->pcie_gen},
        {"pci.link_width", &d->pcie_width},
        {"nvlink.links", &d->nvlink_links},
        {"nvlink.version", &d->nvlink_version},
        {"fans", &d->fans},
        {"mig.max_instances", &d->mig_max_instances},
    };
    for (size_t i = 0; i < sizeof uints / sizeof uints[0]; i++)
        if (get_uint(r, uints[i].key, uints[i].dst, 0, err, errlen) < 0)
            return -1;
    unsigned ecc = 0, mig = 0, c2c = 0;
    if (get_uint(r, "memory.ecc", &ecc, 0, err, errlen) < 0 || get_uint(r, "mig.supported", &mig, 0, err, errlen) < 0 ||
        get_uint(r, "c2c", &c2c, 0, err, errlen) < 0)
        return -1;
    d->ecc = ecc != 0;
    d->c2c = c2c != 0;
    d->mig_supported = mig != 0;
    if (d->mig_supported && fill_mig_board(r, &d->mig_board, err, errlen))
        return -1;
    if (get_ull(r, "l2_cache_bytes", &d->l2_bytes, 0, err, errlen) < 0 ||
        get_ull(r, "memory.cuda_total_bytes", &d->cuda_total, 0, err, errlen) < 0)
        return -1;
    if (!d->cuda_total || d->cuda_total > d->mem_total)
        d->cuda_total = d->mem_total;
    /* What the driver keeps is what CUDA does not get: on a real H200 (driver 580.159.04) NVML's reserved,
     * 644939776 bytes, is exactly NVML's total less cuDeviceTotalMem (tests/data/gpu/h200), so the catalog's
     * CUDA total (measured, or derived in fakegpu/profiles/compile.py) is the one source of both. */
    d->mem_reserved = d->mem_total - d->cuda_total;
    get_double(r, "memory.bandwidth_gb_s", &d->mem_bandwidth_gb_s);
    get_double(r, "nvlink.bandwidth_gb_s", &d->nvlink_bandwidth_gb_s);

    double w = 0;
    if (get_double(r, "power.default_limit_w", &w) != 0 || w <= 0) {
        fg_seterr(err, errlen, "line %d lacks power.default_limit_w", r->line);
        return -1;
    }
    d->power_default_mw = watts_to_mw(w);
    d->power_max_mw = get_double(r, "power.max_limit_w", &w) == 0 ? watts_to_mw(w) : d->power_default_mw;
    d->power_min_mw = get_double(r, "power.min_limit_w", &w) == 0 ? watts_to_mw(w) : d->power_default_mw / 2;
    if (fill_load(r, &d->load, err, errlen))
        return -1;
    if (!d->clock_boost_mhz)
        d->clock_boost_mhz = d->clock_base_mhz;
    if (get_uint_list(r, "clocks_mhz.memory_supported", d->mem_clocks, FG_MAX_MEM_CLOCKS, &d->mem_clock_count, err,
                      errlen) < 0)
        return -1;
    if (!d->mem_clock_count)
        d->mem_clocks[d->mem_clock_count++] = d->clock_mem_mhz;
    /* Where no board was measured: video engines top out a little below boost, graphics clocks go down to the
     * 210 MHz most boards list, and thresholds are an A100/H100's of the 550 branch (HBM with a limit of its own). */
    if (!d->clock_video_mhz)
        d->clock_video_mhz = d->clock_boost_mhz * 9 / 10;
    if (!d->clock_graphics_min_mhz || d->clock_graphics_min_mhz > d->clock_boost_mhz)
        d->clock_graphics_min_mhz = d->clock_boost_mhz < 210 ? d->clock_boost_mhz : 210;
    if (!d->temp_shutdown_c) {
        d->temp_shutdown_c = 92;
        d->temp_slowdown_c = 89;
        d->temp_gpu_max_c = 87;
        d->temp_mem_max_c = d->memory_type[0] == 'H' ? 95 : 0;
    }
    if (!d->pcie_gen)
        d->pcie_gen = 4;
    if (!d->pcie_width)
        d->pcie_width = 16;
    return 0;
}

/* A `device` record of a device table: identity as written by Python, profile facts alongside. */
static int fill_device(const fg_record *r, unsigned position, fg_device *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (fill_profile(r, d, err, errlen))
        return -1;
    unsigned index = position;
    if (get_uint(r, "index", &index, 0, err, errlen) < 0)
        return -1;
    if (index != position) {
        fg_seterr(err, errlen, "line %d: index=%u but devices must be listed in index order (expected %u)",
                  r->line, index, position);
        return -1;
    }
    d->index = index;
    if (get_str(r, "uuid", d->uuid, sizeof d->uuid, 1, err, errlen) ||
        get_str(r, "pci_bus_id", d->pci_bus_id, sizeof d->pci_bus_id, 1, err, errlen))
        return -1;
    get_str(r, "serial", d->serial, sizeof d->serial, 0, err, errlen);
    get_str(r, "profile", d->profile, sizeof d->profile, 0, err, errlen);
    d->minor_number = index;
    if (get_uint(r, "minor_number", &d->minor_number, 0, err, errlen) < 0)
        return -1;
    if (sscanf(d->pci_bus_id, "%x:%x:%x.%x", &d->pci_domain, &d->pci_bus, &d->pci_dev, &d->pci_function) != 4) {
        fg_seterr(err, errlen, "line %d: pci_bus_id=%s is not DOMAIN:BUS:DEV.FN", r->line, d->pci_bus_id);
        return -1;
    }
    const char *layout = fg_record_get(r, "mig.layout");
    if (layout && !*layout) {
        /* A MIG-mode GPU named whole in a container: MIG mode on, no MIG device (fakegpu/devices/select.py). */
        if (!d->mig_board.nprofiles) {
            fg_seterr(err, errlen, "line %d: mig.layout: %s has no MIG profile table in the catalog", r->line,
                      d->name);
            return -1;
        }
        d->mig_mode = 1;
        d->mig_count = 0;
    } else if (layout) {
        char inner[200];
        if (apply_mig(d, layout, inner, sizeof inner)) {
            fg_seterr(err, errlen, "line %d: mig.layout: %s", r->line, inner);
            return -1;
        }
    }
    return 0;
}

static int read_device_table(const char *path, fg_devset *out, char *err, size_t errlen)
{
    fg_table t;
    int rc = fg_table_read(path, &t, err, errlen);
    if (rc != FG_TABLE_OK)
        return rc == FG_TABLE_MISSING ? FG_DEV_MISSING : FG_DEV_CORRUPT;
    char inner[256] = "";
    if (t.is_catalog) {
        fg_seterr(err, errlen, "%s is a catalog table, not a device table", path);
        rc = FG_DEV_CORRUPT;
    } else if (t.nrecords > FG_MAX_DEVICES) {
        fg_seterr(err, errlen, "%s lists %zu devices; at most %d", path, t.nrecords, FG_MAX_DEVICES);
        rc = FG_DEV_CORRUPT;
    } else {
        rc = FG_DEV_OK;
        for (size_t i = 0; i < t.nrecords && rc == FG_DEV_OK; i++)
            if (fill_device(&t.records[i], (unsigned)i, &out->dev[i], inner, sizeof inner)) {
                fg_seterr(err, errlen, "%s: %s", path, inner);
                rc = FG_DEV_CORRUPT;
            }
        if (rc == FG_DEV_OK) {
            out->count = (unsigned)t.nrecords;
            const char *spec = fg_record_get(&t.header, "spec");
            const char *seed = fg_record_get(&t.header, "seed");
            fg_strlcpy(out->spec, spec ? spec : "", sizeof out->spec);
            fg_strlcpy(out->seed, seed ? seed : "", sizeof out->seed);
            const char *driver = fg_record_get(&t.header, "driver");
            if (driver && fg_is_driver_version(driver))
                fg_strlcpy(out->driver, driver, sizeof out->driver);
        }
    }
    fg_table_free(&t);
    return rc;
}

/* ---- FAKEGPU_DEVICES ----------------------------------------------------------------------------- */

/* normalise() of fakegpu/profiles/matching.py: trim, lower, runs of whitespace/'_' to '-', drop "nvidia-". */
static void normalise(const char *in, char *out, size_t len)
{
    while (*in && isspace((unsigned char)*in))
        in++;
    size_t n = strlen(in);
    while (n && isspace((unsigned char)in[n - 1]))
        n--;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < len;) {
        unsigned char c = (unsigned char)in[i];
        if (isspace(c) || c == '_') {
            while (i < n && (isspace((unsigned char)in[i]) || in[i] == '_'))
                i++;
            out[o++] = '-';
        } else {
            out[o++] = (char)tolower(c);
            i++;
        }
    }
    out[o] = '\0';
    if (strncmp(out, "nvidia-", 7) == 0)
        memmove(out, out + 7, strlen(out + 7) + 1);
}

static int key_matches(const char *key, const char *wanted)
{
    char norm[256];
    normalise(key, norm, sizeof norm);
    return strcmp(norm, wanted) == 0;
}

static int profile_matches(const fg_record *r, const char *wanted)
{
    const char *id = fg_record_get(r, "id");
    const char *name = fg_record_get(r, "name");
    const char *aliases = fg_record_get(r, "aliases");
    if ((id && key_matches(id, wanted)) || (name && key_matches(name, wanted)))
        return 1;
    if (aliases) {
        char buf[1024];
        fg_strlcpy(buf, aliases, sizeof buf);
        char *save = NULL;
        for (char *a = strtok_r(buf, ",", &save); a; a = strtok_r(NULL, ",", &save))
            if (key_matches(a, wanted))
                return 1;
    }
    return 0;
}

/* Catalog lookup with Python's tie rule: profiles sorted by id, first one claiming the key wins. */
static const fg_record *find_profile(const fg_table *cat, const char *name)
{
    char wanted[256];
    normalise(name, wanted, sizeof wanted);
    const fg_record *best = NULL;
    const char *best_id = NULL;
    for (size_t i = 0; i < cat->nrecords; i++) {
        const fg_record *r = &cat->records[i];
        const char *id = fg_record_get(r, "id");
        if (!id || !profile_matches(r, wanted))
            continue;
        if (!best || strcmp(id, best_id) < 0) {
            best = r;
            best_id = id;
        }
    }
    return best;
}

static int is_name(const char *s)
{
    if (!isalnum((unsigned char)s[0]))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr(" ._-", *s))
            return 0;
    return 1;
}

static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int parse_parts(const char *spec, const char *seed, const fg_table *cat, fg_devset *out, char *err,
                       size_t errlen)
{
    char buf[FG_MAX_SPEC_LENGTH + 1];
    if (strlen(spec) > FG_MAX_SPEC_LENGTH || fg_strlcpy(buf, spec, sizeof buf)) {
        fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES (%zu bytes): the spec is longer than %d bytes", strlen(spec),
                  FG_MAX_SPEC_LENGTH);
        return FG_DEV_BADSPEC;
    }
    if (strlen(seed) > FG_MAX_SEED_LENGTH) {
        fg_seterr(err, errlen, "invalid FAKEGPU_SEED (%zu bytes): it is longer than %d bytes", strlen(seed),
                  FG_MAX_SEED_LENGTH);
        return FG_DEV_BADSPEC;
    }
    unsigned total = 0, position = 0;
    char *cursor = buf;
    for (;;) {
        char *comma = strchr(cursor, ',');
        if (comma)
            *comma = '\0';
        char *part = trim(cursor);
        position++;
        if (!*part) {
            fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': part %u is empty (stray comma?)", spec, position);
            return FG_DEV_BADSPEC;
        }
        char *colon = strchr(part, ':');
        char *count_text = NULL, *layout = NULL;
        if (colon) {
            *colon = '\0';
            count_text = trim(colon + 1);
            /* NAME:mig=..., NAME:COUNT:mig=... (spec.py: the last field, when it starts with mig=) */
            char *last = strrchr(count_text, ':');
            char *field = last ? trim(last + 1) : count_text;
            if (!strncasecmp(field, "mig=", 4)) {
                layout = field + 4;
                if (last) {
                    *last = '\0';
                    count_text = trim(count_text);
                } else {
                    colon = NULL;
                }
            }
            if (colon && strchr(count_text, ':')) {
                fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': a part is NAME[:COUNT][:mig=LAYOUT]", spec);
                return FG_DEV_BADSPEC;
            }
        }
        char *name = trim(part);
        if (!*name) {
            fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': no profile name before ':'", spec);
            return FG_DEV_BADSPEC;
        }
        if (!is_name(name)) {
            fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': '%s' is not a profile name", spec, name);
            return FG_DEV_BADSPEC;
        }
        const fg_record *prof = find_profile(cat, name);
        if (!prof) {
            fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': unknown profile '%s' (`fakegpu profiles` lists them)",
                      spec, name);
            return FG_DEV_BADSPEC;
        }
        unsigned long count = 1;
        if (colon) {
            size_t digits = strspn(count_text, "0123456789");
            if (!*count_text || count_text[digits]) {
                fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': count '%s' is not a whole number", spec,
                          count_text);
                return FG_DEV_BADSPEC;
            }
            while (count_text[0] == '0' && count_text[1]) /* int("007") is 7 in Python too */
                count_text++;
            count = strlen(count_text) > 6 ? 1000000ul : strtoul(count_text, NULL, 10);
            if (count < 1 || count > FG_MAX_DEVICES) {
                fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': count %s is outside 1..%d", spec, count_text,
                          FG_MAX_DEVICES);
                return FG_DEV_BADSPEC;
            }
        }
        total += (unsigned)count;
        if (total > FG_MAX_DEVICES) {
            fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': asks for %u devices; at most %d in all", spec, total,
                      FG_MAX_DEVICES);
            return FG_DEV_BADSPEC;
        }
        const char *id = fg_record_get(prof, "id");
        for (unsigned long i = 0; i < count; i++) {
            fg_device *d = &out->dev[out->count];
            memset(d, 0, sizeof *d);
            if (fill_profile(prof, d, err, errlen))
                return FG_DEV_CORRUPT;
            fg_strlcpy(d->profile, id, sizeof d->profile);
            fg_identity(seed, out->count, id, d);
            if (layout) {
                char inner[200];
                if (!d->mig_supported) {
                    fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': %s does not support MIG", spec, d->name);
                    return FG_DEV_BADSPEC;
                }
                if (apply_mig(d, layout, inner, sizeof inner)) {
                    fg_seterr(err, errlen, "invalid FAKEGPU_DEVICES '%s': %s", spec, inner);
                    return FG_DEV_BADSPEC;
                }
            }
            out->count++;
        }
        if (!comma)
            break;
        cursor = comma + 1;
    }
    return FG_DEV_OK;
}

int fg_devices_from_spec(const char *spec, const char *seed, const char *catalog_path, fg_devset *out, char *err,
                         size_t errlen)
{
    memset(out, 0, sizeof *out);
    fg_table cat;
    int rc = fg_table_read(catalog_path, &cat, err, errlen);
    if (rc != FG_TABLE_OK)
        return rc == FG_TABLE_MISSING ? FG_DEV_MISSING : FG_DEV_CORRUPT;
    if (!cat.is_catalog) {
        fg_seterr(err, errlen, "%s is not a catalog table (kind=catalog)", catalog_path);
        fg_table_free(&cat);
        return FG_DEV_CORRUPT;
    }
    rc = parse_parts(spec, seed, &cat, out, err, errlen);
    fg_table_free(&cat);
    if (rc != FG_DEV_OK) {
        out->count = 0;
        return rc;
    }
    fg_strlcpy(out->spec, spec, sizeof out->spec);
    fg_strlcpy(out->seed, seed, sizeof out->seed);
    snprintf(out->source, sizeof out->source, "FAKEGPU_DEVICES=%.200s (catalog %.250s)", spec, catalog_path);
    return FG_DEV_OK;
}


const char *fg_vbios_version(const fg_device *d, int upper, char *buf, size_t len)
{
    /* VBIOS majors by generation as real boards report them (A100 92.00..., H100 96.00...). */
    static const struct {
        const char *arch;
        unsigned major;
    } majors[] = {{"maxwell", 0x84}, {"pascal", 0x86}, {"volta", 0x88}, {"turing", 0x90},
                  {"ampere", 0x92},  {"ada", 0x95},    {"hopper", 0x96}, {"blackwell", 0x97}};
    unsigned major = 0x92;
    for (size_t i = 0; i < sizeof majors / sizeof majors[0]; i++)
        if (!strcmp(d->architecture, majors[i].arch))
            major = majors[i].major;
    snprintf(buf, len, upper ? "%02X.00.%02X.00.%02X" : "%02x.00.%02x.00.%02x", major,
             (d->pci_device_id >> 4) & 0xFF, d->pci_device_id & 0x0F);
    return buf;
}

const char *fg_catalog_path(char *buf, size_t len)
{
    const char *env = getenv("FAKEGPU_CATALOG_TABLE");
    if (env && *env) {
        fg_strlcpy(buf, env, len);
        return buf;
    }
    if (FG_CATALOG_PATH[0] && access(FG_CATALOG_PATH, R_OK) == 0) {
        fg_strlcpy(buf, FG_CATALOG_PATH, len);
        return buf;
    }
    /* In a container: the runtime mounts it there. nvidia-smi needs this one, its copy of this code sits in
     * /usr/bin, not beside the library (a `docker exec` has FAKEGPU_DEVICES and no table to read). */
    if (access(FG_CONTAINER_CATALOG_TABLE, R_OK) == 0) {
        fg_strlcpy(buf, FG_CONTAINER_CATALOG_TABLE, len);
        return buf;
    }
    /* Installed layout: catalog.tbl next to libnvidia-ml.so.1 (or the nvidia-smi binary's library). */
    Dl_info info;
    if (dladdr((void *)fg_catalog_path, &info) && info.dli_fname) {
        fg_strlcpy(buf, info.dli_fname, len);
        char *slash = strrchr(buf, '/');
        if (slash && (size_t)(slash - buf) + sizeof "/" FG_CATALOG_TABLE_NAME <= len) {
            strcpy(slash, "/" FG_CATALOG_TABLE_NAME);
            return buf;
        }
    }
    fg_strlcpy(buf, FG_CATALOG_TABLE_NAME, len);
    return buf;
}

static int spec_is_none(const char *spec)
{
    char norm[16];
    while (*spec && isspace((unsigned char)*spec))
        spec++;
    if (!*spec)
        return 1;
    normalise(spec, norm, sizeof norm);
    static const char *const off[] = {FG_OFF_VALUES};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (strcmp(norm, off[i]) == 0)
            return 1;
    return 0;
}

/* The table fg_devices_load reads, or NULL when it resolves FAKEGPU_DEVICES (or nothing). */
static const char *table_path(void)
{
    const char *table = getenv("FAKEGPU_DEVICE_TABLE");
    if (table && *table)
        return table;
    if (!getenv("FAKEGPU_DEVICES") && access(FG_CONTAINER_DEVICE_TABLE, R_OK) == 0)
        return FG_CONTAINER_DEVICE_TABLE;
    return NULL;
}

int fg_devices_table_driver(char *buf, size_t len)
{
    const char *path = table_path();
    FILE *f = path ? fopen(path, "re") : NULL;
    if (!f)
        return 0;
    /* getline: the header holds the spec (1024 bytes) and NVIDIA_VISIBLE_DEVICES's entries (4096) before driver=. */
    char *line = NULL;
    size_t cap = 0;
    int found = 0;
    while (getline(&line, &cap, f) >= 0) {
        if (line[0] == '#')
            continue;
        if (strncmp(line, "fakegpu-device-table\t", 21))
            break;
        line[strcspn(line, "\n")] = '\0';
        char *save = NULL;
        for (char *field = strtok_r(line, "\t", &save); field; field = strtok_r(NULL, "\t", &save))
            if (!strncmp(field, "driver=", 7) && fg_is_driver_version(field + 7) && strlen(field + 7) < len) {
                fg_strlcpy(buf, field + 7, len);
                found = 1;
            }
        break;
    }
    free(line);
    fclose(f);
    return found;
}

int fg_devices_load(fg_devset *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (err && errlen)
        err[0] = '\0';
    const char *table = getenv("FAKEGPU_DEVICE_TABLE");
    if (table && *table) {
        int rc = read_device_table(table, out, err, errlen);
        if (rc == FG_DEV_OK)
            snprintf(out->source, sizeof out->source, "FAKEGPU_DEVICE_TABLE=%.400s", table);
        return rc;
    }
    const char *spec = getenv("FAKEGPU_DEVICES");
    /* Inside a container the table is mounted at a fixed place; processes whose environment was cleaned
     * (env -i, su -, sudo) still see the GPUs, as they would on a real host. An explicit FAKEGPU_DEVICES,
     * even empty or void, is the user's word and wins. */
    if (!spec && access(FG_CONTAINER_DEVICE_TABLE, R_OK) == 0) {
        int rc = read_device_table(FG_CONTAINER_DEVICE_TABLE, out, err, errlen);
        if (rc == FG_DEV_OK)
            snprintf(out->source, sizeof out->source, "%s", FG_CONTAINER_DEVICE_TABLE);
        return rc;
    }
    if (!spec || spec_is_none(spec)) {
        fg_strlcpy(out->source, "no FAKEGPU_DEVICE_TABLE and no FAKEGPU_DEVICES", sizeof out->source);
        return FG_DEV_OK;
    }
    const char *seed = getenv("FAKEGPU_SEED");
    if (!seed || !*seed)
        seed = "0";
    char path[512];
    return fg_devices_from_spec(spec, seed, fg_catalog_path(path, sizeof path), out, err, errlen);
}
