/* Handing the whole create over to the Python runtime (fg_defer, declared in request.h for the readers). */
#ifndef FG_HANDOVER_H
#define FG_HANDOVER_H

#include "request.h"

/* The interpreter and code the sh front passed (--python, --pycode); debug: say why on stderr. */
void fg_handover_init(const char *python, const char *pycode, int debug);

#endif
