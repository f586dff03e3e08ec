/* fakegpu-devices: the C reader's view of this environment's devices, one tab-separated line each
 * (index, uuid, serial, pci_bus_id, name, profile, memory total), then for a board in MIG mode one line per MIG
 * device ("mig", parent index, MIG index, GPU instance ID, start, profile name, UUID). The differential tests compare it with
 * fakegpu/devices; exit status 0 on success, 1 with the reason on stderr otherwise. */
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

#include "fg_devices.h"
#include "fg_visible.h"

/* --cuda: the CUDA view instead (CUDA_VISIBLE_DEVICES applied, MIG slices expanded), with each device's board
 * index, memory total and SM count appended. */
int main(int argc, char **argv)
{
    int cuda = argc > 1 && !strcmp(argv[1], "--cuda");
    static fg_devset set;
    char err[512];
    if (fg_devices_load(&set, err, sizeof err) != FG_DEV_OK) {
        fprintf(stderr, "fakegpu-devices: %s\n", err);
        return 1;
    }
    if (cuda) {
        static unsigned board[FG_MAX_DEVICES];
        fg_devices_cuda_view(&set, getenv("CUDA_VISIBLE_DEVICES"), board);
        for (unsigned i = 0; i < set.count; i++)
            printf("%u\t%s\t%s\t%u\t%llu\t%u\n", set.dev[i].index, set.dev[i].uuid, set.dev[i].name, board[i],
                   set.dev[i].cuda_total, set.dev[i].sm_count);
        return 0;
    }
    for (unsigned i = 0; i < set.count; i++) {
        const fg_device *d = &set.dev[i];
        printf("%u\t%s\t%s\t%s\t%s\t%s\t%llu\n", d->index, d->uuid, d->serial, d->pci_bus_id, d->name, d->profile,
               d->mem_total);
        for (unsigned m = 0; m < d->mig_count; m++)
            printf("mig\t%u\t%u\t%u\t%u\t%s\t%s\n", d->index, d->mig[m].index, d->mig[m].gi_id, d->mig[m].start,
                   d->mig_board.profiles[d->mig[m].profile].name, d->mig[m].uuid);
    }
    return 0;
}
