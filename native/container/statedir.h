/* The host's state folders, as hook/fakegpu_hook/statedir.py lays them out (that file says why): the state
 * root a root-only folder on a nosuid,nodev,noexec filesystem (a tmpfs mounted there on first use), and per
 * container <root>/<id> (0700: devices.tbl, inject.log) with state/ (1777), the container's /run/fakegpu. */
#ifndef FG_STATEDIR_H
#define FG_STATEDIR_H

#include <stddef.h>

/* 0, or -1 with err worded as statedir.py's StateRootError. */
int fg_secure_state_root(const char *path, char *err, size_t errlen);
/* <root>/<id> and its state/ (the state root secured first); host_dir must name <root>/<id>. */
int fg_make_container_dir(const char *state_root, const char *host_dir, char *err, size_t errlen);

#endif
