/* CUDA_VISIBLE_DEVICES applied to a device set, MIG slices expanded: the devices a CUDA process enumerates,
 * exactly as fakegpu/devices/cuda_view.py computes them. */
#ifndef FG_VISIBLE_H
#define FG_VISIBLE_H

#include "fg_devices.h"

/* Rewrite `set` into the CUDA view of `visible` (NULL: CUDA_VISIBLE_DEVICES unset). board[i] receives the index
 * in the original set of the board CUDA device i lives on (where NVML counts its memory). */
FG_HIDDEN void fg_devices_cuda_view(fg_devset *set, const char *visible, unsigned board[FG_MAX_DEVICES]);

#endif
