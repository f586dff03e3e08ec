/* The driver's side of FakeGPU's private export table (common/fgc_private.h): cuGetExportTable answers FakeGPU's
 * own table id; the private tables of NVIDIA's runtime are not ours to imitate (their ids and layouts are
 * undocumented), so any other id is refused as not supported, and counted as such. */
#include <string.h>

#include "fg_faults.h"
#include "fgc_private.h"
#include "fgc_unsup.h"
#include "fgd.h"
#include "fgd_timeline.h"

static void library_loaded(const char *library)
{
    struct CUctx_st *c = fgd_current();
    if (!c || !library)
        return;
    if (strcmp(library, "cublas") == 0)
        fgd_load_part(c->device, FGD_PART_CUBLAS);
    else if (strcmp(library, "cudnn") == 0)
        fgd_load_part(c->device, FGD_PART_CUDNN);
}

static unsigned nccl_operation(int rank, int device)
{
    unsigned code = rank >= 0 ? fg_fault_collective((unsigned)rank) : 0;
    if (code == FG_FAULT_NCCL_HANG)
        fgd_hang(device);
    return code;
}

static const fgc_private_table table = {sizeof table, library_loaded, nccl_operation, fgd_hang,
                                        fgd_timeline_library, fgd_timeline_set_sink};

FGC_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(pExportTableId->bytes, fgc_private_table_id, sizeof pExportTableId->bytes) != 0)
        return (CUresult)fgc_refuse("cuda", "cuGetExportTable (NVIDIA's private tables)", CUDA_ERROR_NOT_SUPPORTED);
    FGD_INIT();
    *ppExportTable = &table;
    return CUDA_SUCCESS;
}
