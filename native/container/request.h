/* What fakegpu-create is asked to do: the runtime's settings (settings.py: the config file plus FAKEGPU_*
 * overrides) and the container's device request (env.py). Anything read differently from Python hands the
 * whole create over to Python (fg_defer), before anything is changed. */
#ifndef FG_REQUEST_H
#define FG_REQUEST_H

#include "fg_contract.h" /* generated from hook/fakegpu_hook/contract.py */

/* One field per setting of the contract, named by its key. */
#define FG_STRING_FIELD(key, variable, default_value) char *key;
#define FG_FLAG_FIELD(key, variable, default_value) int key;
typedef struct {
    FG_STRING_SETTINGS(FG_STRING_FIELD)
    FG_FLAG_SETTINGS(FG_FLAG_FIELD)
} settings;
#undef FG_STRING_FIELD
#undef FG_FLAG_FIELD
typedef struct {
    char *spec;       /* FAKEGPU_DEVICES, or the host's inventory */
    const char *seed; /* NULL: not set */
    const char *source;
    /* NVIDIA_VISIBLE_DEVICES's entries, trimmed and comma-joined: NULL for every device of spec, "" for
     * none (env.py's DeviceRequest.visible). */
    char *visible;
    unsigned caps; /* bit i: FG_DRIVER_CAPABILITIES[i] granted */
    const char *driver; /* env.py's requested_driver: the container's, the setting's, or the default */
} request;

/* Hand the create to the Python runtime (exec; does not return). */
void fg_defer(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

void load_settings(settings *s);
/* 1 with a request, 0 when the container asks for nothing. */
int device_request(char **env, int n, const settings *s, request *r);
/* The mask bit of a driver capability (FG_UTILITY, FG_COMPUTE, ...), 0 for none. */
unsigned capability_bit(const char *name);
/* The value of the last NAME= entry: runc applies process.env in order, a later entry overwriting. */
const char *env_lookup(char **env, int n, const char *name);
int is_ascii(const char *s);

#endif
