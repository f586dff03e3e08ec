#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
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


/* 1 with a request, 0 when the container asks for nothing. Non-ASCII values go to Python, whose strip() and
 * lower() know all of Unicode. */
int device_request(char **env, int n, const settings *s, request *r)
{
    const char *seed = env_lookup(env, n, FG_SEED_VARIABLE);
    r->seed = seed && *seed ? seed : NULL;
    const char *value = env_lookup(env, n, FG_DEVICES_VARIABLE);
    if (value) {
        if (!is_ascii(value))
            fg_defer(FG_DEVICES_VARIABLE " is not ASCII");
        if (off_value(value))
            return 0;
        r->spec = strdup(value);
        r->source = FG_DEVICES_VARIABLE;
        return 1;
    }
    if (!s->honour_nvidia_env)
        return 0;
    const char *nvidia = env_lookup(env, n, FG_NVIDIA_DEVICES_VARIABLE);
    if (!nvidia)
        return 0;
    if (!is_ascii(nvidia) || !is_ascii(s->nvidia_profile))
        fg_defer(FG_NVIDIA_DEVICES_VARIABLE " or nvidia_profile is not ASCII");
    if (off_value(nvidia))
        return 0;
    char *v = strip_lower(nvidia);
    unsigned count = 0;
    if (!strcmp(v, "all")) {
        count = 1;
    } else {
        for (char *p = v;;) {
            size_t len = strcspn(p, ",");
            for (size_t i = 0; i < len; i++)
                if (!py_space((unsigned char)p[i])) {
                    count++;
                    break;
                }
            if (!p[len])
                break;
            p += len + 1;
        }
    }
    free(v);
    char buf[512];
    snprintf(buf, sizeof buf, "%s:%u", s->nvidia_profile, count ? count : 1);
    r->spec = strdup(buf);
    r->source = FG_NVIDIA_DEVICES_VARIABLE;
    return 1;
}
