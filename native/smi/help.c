/* -h: the options this nvidia-smi understands, in the real tool's wording where they overlap. */
#include <stdio.h>

#include "smi.h"

void smi_help(void)
{
    printf("NVIDIA System Management Interface -- FakeGPU build\n\n"
           "NVSMI provides monitoring information for each of NVIDIA's Tesla devices\n"
           "and each of NVIDIA's Fermi-based and higher architecture devices. Here, the devices are\n"
           "simulated by FakeGPU from $FAKEGPU_DEVICE_TABLE or $FAKEGPU_DEVICES.\n\n"
           "nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...\n\n"
           "    -h,   --help                Print usage information and exit.\n\n"
           "  LIST OPTIONS:\n\n"
           "    -L,   --list-gpus           Display a list of GPUs connected to the system.\n\n"
           "  SUMMARY OPTIONS:\n\n"
           "    <no arguments>              Show a summary of GPUs connected to the system.\n\n"
           "    [plus any of]\n\n"
           "    -i,   --id=                 Target a specific GPU (index, UUID, PCI bus id or serial;\n"
           "                                comma-separated for several).\n"
           "    -l,   --loop=               Probe until Ctrl+C at specified second interval.\n"
           "    -lms, --loop-ms=            Probe until Ctrl+C at specified millisecond interval.\n\n"
           "  QUERY OPTIONS:\n\n"
           "    -q,   --query               Display GPU or Unit info.\n"
           "    -x,   --xml-format          Produce XML output (with -q).\n"
           "    -d,   --display=            Display only selected information (with -q, not -x): MEMORY,\n"
           "                                UTILIZATION, ECC, TEMPERATURE, POWER, CLOCK, COMPUTE, PIDS,\n"
           "                                PERFORMANCE, SUPPORTED_CLOCKS, PAGE_RETIREMENT, ACCOUNTING,\n"
           "                                ENCODER_STATS, SUPPORTED_GPU_TARGET_TEMP, VOLTAGE, FBC_STATS,\n"
           "                                ROW_REMAPPER, RESET_STATUS, GSP_FIRMWARE_VERSION; comma-separated.\n\n"
           "  SELECTIVE QUERY OPTIONS:\n\n"
           "    --query-gpu=                Information about GPU. Call --help-query-gpu for more info.\n"
           "    --query-compute-apps=       List of currently active compute processes (pid, process_name,\n"
           "                                used_memory, gpu_uuid, gpu_name, gpu_bus_id, gpu_serial).\n"
           "    --format=                   Comma separated list of format options: csv, noheader, nounits.\n\n"
           "  TOPOLOGY:\n\n"
           "    topo -m                     Display the GPU topology matrix.\n"
           "    nvlink -s                   Display the NVLink status of each GPU's links.\n\n"
           "Please see the nvidia-smi(1) manual page for more detailed information.\n");
}
