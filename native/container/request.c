#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "fg_json.h"

static char **setting_slot(settings *s, const char *key)
{
    static const char *names[] = {"low_level_runtime", "nvidia_profile", "native_lib_dir", "nvidia_smi",
                                  "state_root",        "hook_path",      "hook_stage",     "injection"};
    char **slots[] = {&s->low_level_runtime, &s->nvidia_profile, &s->native_lib_dir, &s->nvidia_smi,
                      &s->state_root,        &s->hook_path,      &s->hook_stage,     &s->injection};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(key, names[i]))
            return slots[i];
    return NULL;
}

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
        fg_defer("honour_nvidia_env is not ASCII");
    char *t = strip_lower(v);
    int yes = !strcmp(t, "1") || !strcmp(t, "true") || !strcmp(t, "yes") || !strcmp(t, "on");
    free(t);
    return yes;
}

void load_settings(settings *s)
{
    memset(s, 0, sizeof *s);
    s->low_level_runtime = "runc";
    s->nvidia_profile = "a100";
    s->native_lib_dir = "";
    s->nvidia_smi = "";
    s->state_root = "/run/fakegpu";
    s->hook_path = "";
    s->hook_stage = "createContainer";
    s->injection = "runtime";
    const char *path = getenv("FAKEGPU_CONFIG");
    if (!path || !*path)
        path = "/etc/fakegpu/config.json";
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
            if (!strcmp(name, "honour_nvidia_env")) {
                if (n->type == FG_JTRUE || n->type == FG_JFALSE)
                    s->honour_nvidia_env = n->type == FG_JTRUE;
                else if (n->type == FG_JSTRING) {
                    char *v = fg_json_string(&j, c);
                    if (!v)
                        fg_defer("config file %s: odd value", path);
                    s->honour_nvidia_env = truthy(v);
                } else
                    fg_defer("config file %s: honour_nvidia_env of an odd type", path);
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
    static const struct {
        const char *var, *key;
    } overrides[] = {
        {"FAKEGPU_LOW_LEVEL_RUNTIME", "low_level_runtime"}, {"FAKEGPU_NVIDIA_PROFILE", "nvidia_profile"},
        {"FAKEGPU_NATIVE_DIR", "native_lib_dir"},           {"FAKEGPU_NVIDIA_SMI", "nvidia_smi"},
        {"FAKEGPU_STATE_ROOT", "state_root"},               {"FAKEGPU_HOOK_PATH", "hook_path"},
        {"FAKEGPU_HOOK_STAGE", "hook_stage"},               {"FAKEGPU_INJECTION", "injection"},
    };
    for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++) {
        const char *v = getenv(overrides[i].var);
        if (v && *v)
            *setting_slot(s, overrides[i].key) = (char *)v;
    }
    const char *h = getenv("FAKEGPU_HONOUR_NVIDIA_ENV");
    if (h && *h)
        s->honour_nvidia_env = truthy(h);
    if (strcmp(s->hook_stage, "createContainer") && strcmp(s->hook_stage, "prestart"))
        fg_defer("hook_stage %s", s->hook_stage); /* Python words the error */
    if (strcmp(s->injection, "runtime"))
        fg_defer("injection %s", s->injection);
}

/* ---- what the container asks for: env.py's device_request ------------------------------------------ */

const char *env_lookup(char **env, int n, const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < n; i++)
        if (!strncmp(env[i], name, len) && env[i][len] == '=')
            return env[i] + len + 1;
    return NULL;
}

static int off_value(const char *v)
{
    char *t = strip_lower(v);
    int off = !*t || !strcmp(t, "void") || !strcmp(t, "none");
    free(t);
    return off;
}


/* 1 with a request, 0 when the container asks for nothing. Non-ASCII values go to Python, whose strip() and
 * lower() know all of Unicode. */
int device_request(char **env, int n, const settings *s, request *r)
{
    const char *seed = env_lookup(env, n, "FAKEGPU_SEED");
    r->seed = seed && *seed ? seed : NULL;
    const char *value = env_lookup(env, n, "FAKEGPU_DEVICES");
    if (value) {
        if (!is_ascii(value))
            fg_defer("FAKEGPU_DEVICES is not ASCII");
        if (off_value(value))
            return 0;
        r->spec = strdup(value);
        r->source = "FAKEGPU_DEVICES";
        return 1;
    }
    if (!s->honour_nvidia_env)
        return 0;
    const char *nvidia = env_lookup(env, n, "NVIDIA_VISIBLE_DEVICES");
    if (!nvidia)
        return 0;
    if (!is_ascii(nvidia) || !is_ascii(s->nvidia_profile))
        fg_defer("NVIDIA_VISIBLE_DEVICES or nvidia_profile is not ASCII");
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
    r->source = "NVIDIA_VISIBLE_DEVICES";
    return 1;
}
