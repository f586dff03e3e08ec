#include "fg_state.h"

#include "fg_contract.h" /* generated from hook/fakegpu_hook/contract.py */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


const char *fg_state_dir(char *buf, size_t len)
{
    const char *env = getenv("FAKEGPU_STATE_DIR");
    struct stat st;
    if (env && *env)
        fg_strlcpy(buf, env, len);
    else if (stat(FG_CONTAINER_DIR, &st) == 0 && S_ISDIR(st.st_mode))
        fg_strlcpy(buf, FG_CONTAINER_DIR, len);
    else {
        const char *tmp = getenv("TMPDIR");
        snprintf(buf, len, "%s/fakegpu-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid());
    }
    return buf;
}

static int pid_alive(unsigned pid)
{
    /* EPERM means it exists but belongs to someone else: still alive. */
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static void parse_file(const char *path, unsigned pid, fg_snapshot *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[16384];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line && out->n < FG_STATE_MAX_PROCS;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "proc\t", 5) != 0)
            continue;
        fg_proc p = {.pid = pid, .type = 'C'};
        int have_dev = 0;
        char *cs = NULL;
        strtok_r(line, "\t", &cs);
        for (char *cell = strtok_r(NULL, "\t", &cs); cell; cell = strtok_r(NULL, "\t", &cs)) {
            char *eq = strchr(cell, '=');
            if (!eq)
                continue;
            *eq = '\0';
            const char *k = cell, *v = eq + 1;
            if (!strcmp(k, "device")) {
                char *end;
                p.device = (unsigned)strtoul(v, &end, 10);
                have_dev = *v && !*end;
            } else if (!strcmp(k, "used_bytes"))
                p.used_bytes = strtoull(v, NULL, 10);
            else if (!strcmp(k, "type"))
                p.type = (v[0] == 'G') ? 'G' : 'C';
            else if (!strcmp(k, "name"))
                fg_strlcpy(p.name, v, sizeof p.name);
        }
        if (have_dev)
            out->procs[out->n++] = p;
    }
}

static int by_pid(const void *a, const void *b)
{
    const fg_proc *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->device < y->device ? -1 : x->device > y->device;
}

void fg_state_read(const char *dir, fg_snapshot *out)
{
    out->n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) && out->n < FG_STATE_MAX_PROCS;) {
        char *end = NULL;
        unsigned long pid = strtoul(e->d_name, &end, 10);
        if (end == e->d_name || strcmp(end, ".proc") != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!pid_alive((unsigned)pid)) {
            if (unlink(path) == 0)
                fg_debug("dropped state of dead pid %lu", pid);
            continue;
        }
        parse_file(path, (unsigned)pid, out);
    }
    closedir(d);
    qsort(out->procs, out->n, sizeof out->procs[0], by_pid);
}

static void clean_name(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; *in && o + 1 < len; in++)
        out[o++] = (*in == '\t' || *in == '\n' || *in == '\r') ? ' ' : *in;
    out[o] = '\0';
}

int fg_state_publish(const char *dir, unsigned pid, const char *name, char type,
                     const unsigned long long *used_by_device, unsigned ndevices)
{
    char path[1024], tmp[1100], clean[FG_STATE_NAME_LEN];
    snprintf(path, sizeof path, "%s/%u.proc", dir, pid);
    int any = 0;
    for (unsigned i = 0; i < ndevices; i++)
        any |= used_by_device[i] != 0;
    if (!any)
        return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    mkdir(dir, 0777);
    snprintf(tmp, sizeof tmp, "%s/.%u.proc.tmp", dir, pid);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    clean_name(name ? name : "", clean, sizeof clean);
    for (unsigned i = 0; i < ndevices; i++)
        if (used_by_device[i])
            fprintf(f, "proc\tpid=%u\tdevice=%u\tused_bytes=%llu\ttype=%c\tname=%s\n", pid, i, used_by_device[i],
                    type == 'G' ? 'G' : 'C', clean);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}
