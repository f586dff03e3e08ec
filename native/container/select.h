/* NVIDIA_VISIBLE_DEVICES's selection from the host's devices: fakegpu/devices/select.py's select_devices. */
#ifndef FG_SELECT_H
#define FG_SELECT_H

#include "fg_devices.h"

/* Keep the devices the comma-joined `visible` entries name (host indices, whole GPU and MIG UUIDs, GPU:MIG; ""
 * names none), in host order, renumbered from 0 with their UUID, serial, PCI address and minor number kept; a
 * MIG-mode GPU keeps only the MIG devices named. 0, or -1 when an entry names no device (Python words that
 * error), with the set unchanged. */
int fg_select_visible(fg_devset *set, const char *visible);

#endif
