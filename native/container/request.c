#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "fg_devices.h" /* FG_MAX_SPEC_LENGTH */
#include "fg_driver.h"
#include "fg_versions.h" /* FG_NATIVE_DRIVER_VERSION */
#include "fg_json.h"

/* The string setting a config key names, NULL when it names none (flags: flag_slot). */
static char **setting_slot(settings *s, const char *key)
{
#define FG_SLOT(k, v, d)                                                                                           \
    if (!strcmp(key, #k))                                                                                          \
        return &s->k;
    FG_STRING_SETTINGS(FG_SLOT)
#undef FG_SLOT
    return NULL;
}

static int *flag_slot(settings *s, const char *key)
{
#define FG_SLOT(k, v, d)                                                                                           \
    if (!strcmp(key, #k))                                                                                          \
        return &s->k;
    FG_FLAG_SETTINGS(FG_SLOT)
#undef FG_SLOT
    return NULL;
}

static int one_of(const char *v, const char *const *words, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v, words[i]))
            return 1;
    return 0;
}
/* Whether v is one of a list of the contract's words: ONE_OF(t, FG_TRUE_WORDS). */
#define ONE_OF(v, ...)                                                                                             \
    one_of((v), (const char *const[]){__VA_ARGS__}, sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *))

/* Python's str.isspace() over ASCII: it counts the information separators 0x1c-0x1f too. */
static int py_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

int is_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return 0;
    return 1;
}

/* s.strip().lower() for ASCII text (the caller has checked). */
static char *strip_lower(const char *s)
{
    while (*s && py_space((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && py_space((unsigned char)s[n - 1]))
        n--;
    char *out = malloc(n + 1);
    if (!out)
        fg_defer("out of memory");
    for (size_t i = 0; i < n; i++)
        out[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] - 'A' + 'a') : s[i];
    out[n] = '\0';
    return out;
}

static int truthy(const char *v)
{
    if (!is_ascii(v))
        fg_defer("a flag setting is not ASCII");
    char *t = strip_lower(v);
    int yes = ONE_OF(t, FG_TRUE_WORDS);
    free(t);
    return yes;
}

void load_settings(settings *s)
{
    memset(s, 0, sizeof *s);
#define FG_DEFAULT_STRING(k, v, d) s->k = d;
#define FG_DEFAULT_FLAG(k, v, d) s->k = d;
    FG_STRING_SETTINGS(FG_DEFAULT_STRING)
    FG_FLAG_SETTINGS(FG_DEFAULT_FLAG)
#undef FG_DEFAULT_STRING
#undef FG_DEFAULT_FLAG
    const char *path = getenv(FG_CONFIG_VARIABLE);
    if (!path || !*path)
        path = FG_DEFAULT_CONFIG;
    size_t len;
    int missing;
    char *text = read_file(path, &len, &missing);
    if (!text && !missing)
        fg_defer("cannot read the config file %s", path);
    if (text) {
        fg_json j;
        char err[256] = "not a JSON object";
        if (fg_json_parse(&j, text, len, err, sizeof err) != 0 || j.nodes[0].type != FG_JOBJECT)
            fg_defer("config file %s: %s", path, err);
        for (int c = j.nodes[0].first_child; c >= 0; c = j.nodes[c].next) {
            fg_jnode *n = &j.nodes[c];
            char *name = fg_json_key(&j, c);
            if (!name)
                fg_defer("config file %s: odd key", path);
            int *flag = flag_slot(s, name);
            if (flag) {
                if (n->type == FG_JTRUE || n->type == FG_JFALSE)
                    *flag = n->type == FG_JTRUE;
                else if (n->type == FG_JSTRING) {
                    char *v = fg_json_string(&j, c);
                    if (!v)
                        fg_defer("config file %s: odd value", path);
                    *flag = truthy(v);
                } else
                    fg_defer("config file %s: %s of an odd type", path, name);
            } else {
                char **slot = setting_slot(s, name);
                char *v = slot ? fg_json_string(&j, c) : NULL;
                if (!v)
                    fg_defer("config file %s: key %s unknown or not a string", path, name);
                *slot = v;
            }
            free(name);
        }
        fg_json_free(&j);
    }
    /* Then each setting's FAKEGPU_* override, when set and not empty. */
#define FG_OVERRIDE_STRING(k, v, d)                                                                                \
    if (getenv(v) && *getenv(v))                                                                                   \
        s->k = getenv(v);
#define FG_OVERRIDE_FLAG(k, v, d)                                                                                  \
    if (getenv(v) && *getenv(v))                                                                                   \
        s->k = truthy(getenv(v));
    FG_STRING_SETTINGS(FG_OVERRIDE_STRING)
    FG_FLAG_SETTINGS(FG_OVERRIDE_FLAG)
#undef FG_OVERRIDE_STRING
#undef FG_OVERRIDE_FLAG
    if (!ONE_OF(s->hook_stage, FG_HOOK_STAGES))
        fg_defer("hook_stage %s", s->hook_stage); /* Python words the error */
    static const char *const injections[] = {FG_INJECTIONS};
    if (strcmp(s->injection, injections[0])) /* C does the first (runtime) injection; Python the others */
        fg_defer("injection %s", s->injection);
}

/* ---- what the container asks for: env.py's device_request ------------------------------------------ */

const char *env_lookup(char **env, int n, const char *name)
{
    size_t len = strlen(name);
    const char *found = NULL;
    for (int i = 0; i < n; i++)
        if (!strncmp(env[i], name, len) && env[i][len] == '=')
            found = env[i] + len + 1;
    return found;
}

static int off_value(const char *v)
{
    char *t = strip_lower(v);
    int off = ONE_OF(t, FG_OFF_VALUES);
    free(t);
    return off;
}


static const char *const CAPABILITIES[] = {FG_DRIVER_CAPABILITIES};
#define NCAPABILITIES (sizeof CAPABILITIES / sizeof CAPABILITIES[0])

unsigned capability_bit(const char *name)
{
    for (size_t i = 0; i < NCAPABILITIES; i++)
        if (!strcmp(name, CAPABILITIES[i]))
            return 1u << i;
    return 0;
}

/* env.py's _entries: split on ',', each stripped, empty ones dropped, joined by ',' again (ASCII only: the
 * caller has checked). *count gets how many there are. */
static char *entries(const char *v, unsigned *count)
{
    char *out = malloc(strlen(v) + 1);
    if (!out)
        fg_defer("out of memory");
    size_t o = 0;
    *count = 0;
    for (const char *p = v;;) {
        size_t len = strcspn(p, ",");
        size_t a = 0, b = len;
        while (a < b && py_space((unsigned char)p[a]))
            a++;
        while (b > a && py_space((unsigned char)p[b - 1]))
            b--;
        if (b > a) {
            if (*count)
                out[o++] = ',';
            memcpy(out + o, p + a, b - a);
            o += b - a;
            (*count)++;
        }
        if (!p[len])
            break;
        p += len + 1;
    }
    out[o] = '\0';
    return out;
}

/* Whether the comma-joined list holds `word` as a whole entry. */
static int has_entry(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, word, n))
            return 1;
        if (!p[len])
            return 0;
        p += len + 1;
    }
}

/* Anything longer, non-ASCII or holding a tab or newline goes to Python, which words the error. */
static const char *plain_value(const char *v, size_t limit, const char *name)
{
    if (v && (strlen(v) > limit || !is_ascii(v)))
        fg_defer("%s past its length limit or not ASCII", name);
    return v;
}

/* env.py's driver_capabilities; an unknown name goes to Python, which words the error. */
static unsigned capabilities(const char *v, int legacy)
{
    unsigned all = (1u << NCAPABILITIES) - 1, mask = 0;
    static const char *const defaults[] = {FG_DEFAULT_DRIVER_CAPABILITIES};
    if (!v && legacy)
        return all;
    unsigned n = 0;
    char *names = v ? entries(plain_value(v, FG_MAX_CAPABILITIES_LENGTH, FG_NVIDIA_CAPABILITIES_VARIABLE), &n)
                    : NULL;
    if (!n) {
        free(names);
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            mask |= capability_bit(defaults[i]);
        return mask;
    }
    int every = 0;
    for (char *save = NULL, *c = strtok_r(names, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        unsigned bit = capability_bit(c);
        if (!bit && strcmp(c, FG_CAPABILITIES_ALL))
            fg_defer("unknown capability in " FG_NVIDIA_CAPABILITIES_VARIABLE);
        every |= !bit;
        mask |= bit;
    }
    free(names);
    return every ? all : mask;
}

/* 1 with a request, 0 when the container asks for nothing. Non-ASCII values go to Python, whose strip() and
 * lower() know all of Unicode. */
/* env.py's requested_driver; a value it would refuse goes to Python, which words the error. */
static const char *requested_driver(char **env, int n, const settings *s)
{
    const char *v = env_lookup(env, n, FG_DRIVER_VARIABLE);
    if (v && *v) {
        if (!fg_is_driver_version(v))
            fg_defer(FG_DRIVER_VARIABLE " is not a driver version");
        return v;
    }
    if (*s->driver_version) {
        if (!fg_is_driver_version(s->driver_version))
            fg_defer("the driver_version setting is not a driver version");
        return s->driver_version;
    }
    return FG_NATIVE_DRIVER_VERSION;
}

int device_request(char **env, int n, const settings *s, request *r)
{
    const char *faults = env_lookup(env, n, FG_FAULTS_VARIABLE);
    if (faults && *faults)
        fg_defer(FG_FAULTS_VARIABLE " is set: the fault plan is read by the Python runtime");
    r->driver = NULL;
    const char *seed = env_lookup(env, n, FG_SEED_VARIABLE);
    r->seed = seed && *seed ? seed : NULL;
    r->visible = NULL;
    r->caps = (1u << NCAPABILITIES) - 1;
    const char *value = env_lookup(env, n, FG_DEVICES_VARIABLE);
    if (value) {
        if (!is_ascii(value))
            fg_defer(FG_DEVICES_VARIABLE " is not ASCII");
        if (off_value(value))
            return 0;
        r->spec = strdup(value);
        r->source = FG_DEVICES_VARIABLE;
        r->driver = requested_driver(env, n, s);
        return 1;
    }
    for (int i = 0; i < n; i++)
        if (!strncmp(env[i], FG_CDI_DEVICE_PREFIX, sizeof FG_CDI_DEVICE_PREFIX - 1))
            fg_defer("CDI devices (%s...) are selected by the Python runtime", FG_CDI_DEVICE_PREFIX);
    if (!s->honour_nvidia_env)
        return 0;
    const char *nvidia = plain_value(env_lookup(env, n, FG_NVIDIA_DEVICES_VARIABLE), FG_MAX_VISIBLE_DEVICES_LENGTH,
                                     FG_NVIDIA_DEVICES_VARIABLE);
    const char *cuda = env_lookup(env, n, FG_CUDA_VERSION_VARIABLE);
    const char *require = env_lookup(env, n, FG_REQUIRE_CUDA_VARIABLE);
    int legacy = cuda && *cuda && !(require && *require);
    unsigned count = 0;
    char *list = nvidia ? entries(nvidia, &count) : strdup(legacy ? FG_NVIDIA_ALL : "");
    if (!nvidia && legacy)
        count = 1;
    if (!count || has_entry(list, FG_NVIDIA_VOID)) {
        free(list);
        return 0;
    }
    if (has_entry(list, FG_NVIDIA_NONE)) {
        list[0] = '\0';
        r->visible = list;
    } else if (has_entry(list, FG_NVIDIA_ALL)) {
        free(list);
    } else {
        r->visible = list;
    }
    r->caps = capabilities(env_lookup(env, n, FG_NVIDIA_CAPABILITIES_VARIABLE), legacy);
    if (!is_ascii(s->inventory) || !is_ascii(s->nvidia_profile))
        fg_defer("inventory or nvidia_profile is not ASCII");
    char buf[FG_MAX_SPEC_LENGTH + 2];
    if (*s->inventory)
        r->spec = strdup(s->inventory);
    else if (snprintf(buf, sizeof buf, "%s:1", s->nvidia_profile) < (int)sizeof buf)
        r->spec = strdup(buf); /* settings.py's inventory_spec */
    else
        fg_defer("nvidia_profile past its length limit");
    r->source = FG_NVIDIA_DEVICES_VARIABLE;
    r->driver = requested_driver(env, n, s);
    return 1;
}
