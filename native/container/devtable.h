/* The device table for a resolved set of devices, as fakegpu/devices/table.py renders it (byte for byte). */
#ifndef FG_DEVTABLE_H
#define FG_DEVTABLE_H

#include "fg_devices.h"
#include "fg_table.h"
#include "textbuf.h"

/* 0, or -1 when a device's profile is missing from the catalog. visible: NULL, or the header's visible=. */
int render_table(buf_t *b, const fg_devset *set, const fg_table *cat, const char *spec, const char *seed,
                 const char *visible, const char *driver);

#endif
