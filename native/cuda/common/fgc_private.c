/* The libraries' side of FakeGPU's private export table (fgc_private.h). */
#include "fgc_private.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

/* "FakeGPU private!" as bytes: an id no real table has. */
const unsigned char fgc_private_table_id[16] = {'F', 'a', 'k', 'e', 'G', 'P', 'U', ' ',
                                                'p', 'r', 'i', 'v', 'a', 't', 'e', '!'};

static const fgc_private_table *table;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_ullong told; /* bit per device: this library told the driver already (64 devices are plenty) */

static void find_table(void)
{
    const void *t = NULL;
    CUuuid id;
    memcpy(id.bytes, fgc_private_table_id, sizeof id.bytes);
    if (cuGetExportTable(&t, &id) == CUDA_SUCCESS && t &&
        ((const fgc_private_table *)t)->size >= offsetof(fgc_private_table, library_loaded) + sizeof(void *))
        table = t;
}

void fgc_library_loaded(const char *library)
{
    CUdevice dev = 0;
    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 || dev >= 64)
        return;
    unsigned long long bit = 1ULL << dev;
    if (atomic_load_explicit(&told, memory_order_relaxed) & bit)
        return;
    pthread_once(&once, find_table);
    if (table)
        table->library_loaded(library);
    atomic_fetch_or(&told, bit);
}

/* Whether the driver's table is recent enough to hold `field`. */
#define HAS(field) (table && table->size >= offsetof(fgc_private_table, field) + sizeof(void *))

unsigned fgc_nccl_operation(int rank, int device)
{
    pthread_once(&once, find_table);
    return HAS(nccl_operation) ? table->nccl_operation(rank, device) : 0;
}

void fgc_device_hung(int device)
{
    pthread_once(&once, find_table);
    if (HAS(device_hung))
        table->device_hung(device);
}

void fgc_timeline(const fgc_tl_record *r, const char *name)
{
    pthread_once(&once, find_table);
    if (HAS(timeline))
        table->timeline(r, name);
}

int fgc_timeline_sink(fgc_tl_sink sink)
{
    pthread_once(&once, find_table);
    if (!HAS(timeline_sink))
        return -1;
    table->timeline_sink(sink);
    return 0;
}
