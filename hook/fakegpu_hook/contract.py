"""The container contract: every rule that the runtime's Python, its C fast path (native/container) and the sh
front (front.py) must agree on, written once.

Data only, standard library only: the runtime imports it at every container start. `make native` generates
native/build/gen/fg_contract.h from it (tools/gen_contract.py), and front.py renders the sh front's values from
it, so the C and the sh never hold a hand-copied rule; tests/hook/test_create_differential.py runs the Python
and the C on the same inputs.
"""

# The settings file: /etc/fakegpu/config.json, or $FAKEGPU_CONFIG.
CONFIG_VARIABLE = "FAKEGPU_CONFIG"
DEFAULT_CONFIG = "/etc/fakegpu/config.json"

# Every setting: key in the config file -> (the FAKEGPU_* variable of the runtime's own environment that
# overrides it, default). The runtime runs under dockerd's environment, which users rarely control, so the file
# is the main way; the variables are for tests and one-off runs. honour_nvidia_env is the one flag.
SETTINGS = {
    "low_level_runtime": ("FAKEGPU_LOW_LEVEL_RUNTIME", "runc"),
    # The host's fake GPUs, a device spec (`fakegpu runtime install --devices`): what NVIDIA_VISIBLE_DEVICES
    # selects from, keeping each GPU's host index, UUID and bus id. Empty: one GPU of nvidia_profile.
    "inventory": ("FAKEGPU_INVENTORY", ""),
    # NVIDIA's variables are honoured as NVIDIA's runtime honours them, so images built on CUDA base images
    # (ENV NVIDIA_VISIBLE_DEVICES=all) get the inventory. Off: only FAKEGPU_DEVICES asks, for a host whose
    # default runtime is ours but whose CUDA images should not get fake GPUs.
    "honour_nvidia_env": ("FAKEGPU_HONOUR_NVIDIA_ENV", True),
    "nvidia_profile": ("FAKEGPU_NVIDIA_PROFILE", "a100"),
    "native_lib_dir": ("FAKEGPU_NATIVE_DIR", ""),  # empty: the checkout's native/build/lib
    "nvidia_smi": ("FAKEGPU_NVIDIA_SMI", ""),  # empty: <native_lib_dir>/../bin/nvidia-smi
    "state_root": ("FAKEGPU_STATE_ROOT", "/run/fakegpu"),
    "hook_path": ("FAKEGPU_HOOK_PATH", ""),
    "hook_stage": ("FAKEGPU_HOOK_STAGE", "createContainer"),
    "injection": ("FAKEGPU_INJECTION", "runtime"),
    # The host's driver version (NVML, nvidia-smi, cuDriverGetVersion, /proc/driver/nvidia, the libraries' file
    # names). Empty: the native build's default (fakegpu/data/native_versions.json). A container's own
    # FAKEGPU_DRIVER_VERSION wins, as one-off rehearsal of another host.
    "driver_version": ("FAKEGPU_DRIVER_VERSION", ""),
}
FLAG_SETTINGS = ("honour_nvidia_env",)
# A flag given as a string is on when, stripped and lowercased, it is one of these.
TRUE_WORDS = ("1", "true", "yes", "on")
HOOK_STAGES = ("createContainer", "prestart")
# runtime: the runtime prepares the root and hands runc the bind mounts and device nodes in config.json (one
# Python process per container start, or none with the C fast path); hook: the runtime adds fakegpu-hook, which
# does it all inside runc.
INJECTIONS = ("runtime", "hook")

# runc's global options that take a value (one dash or two, the value the next word unless written --opt=v):
# the subcommand is the first word past them.
RUNC_OPTIONS_WITH_VALUE = ("root", "log", "log-format", "criu", "rootless", "cgroup-manager")

# What a container asks with (its own environment).
DEVICES_VARIABLE = "FAKEGPU_DEVICES"
SEED_VARIABLE = "FAKEGPU_SEED"
DRIVER_VARIABLE = "FAKEGPU_DRIVER_VERSION"
# A fault plan for the container's GPUs (fakegpu/faults/plan.py), the plan's own text: the runtime puts it on the
# container's fault board at create. The C fast path leaves such a container to Python.
FAULTS_VARIABLE = "FAKEGPU_FAULTS"
NVIDIA_DEVICES_VARIABLE = "NVIDIA_VISIBLE_DEVICES"
# CDI devices of FakeGPU's spec (hook/fakegpu_hook/cdi.py): the spec's own edits give the inventory it was written
# for, each device's edits one variable of the prefix whose value selects it as an NVIDIA_VISIBLE_DEVICES entry
# does. One variable per device because CDI merges the edits of several devices and a repeated name keeps only
# its last value. Without FAKEGPU_DEVICES these select, before NVIDIA's variables. The C fast path leaves such a
# container to Python.
CDI_INVENTORY_VARIABLE = "FAKEGPU_CDI_INVENTORY"
CDI_DEVICE_PREFIX = "FAKEGPU_CDI_DEVICE_"
# A FAKEGPU_DEVICES that, stripped and lowercased, is one of these asks for nothing: hands off (unset counts
# the same).
OFF_VALUES = ("", "void", "none")

# NVIDIA_VISIBLE_DEVICES as nvidia-container-toolkit reads it: comma-separated, each entry trimmed, empty
# entries dropped, case kept. An entry VOID (or no entry at all) leaves the container to runc; else NONE gives
# the driver's files and no GPU; else ALL gives the inventory; else each entry is a host index or a GPU UUID.
# Precedence: void, none, all.
NVIDIA_VOID, NVIDIA_NONE, NVIDIA_ALL = "void", "none", "all"
NVIDIA_CAPABILITIES_VARIABLE = "NVIDIA_DRIVER_CAPABILITIES"
# A "legacy" CUDA image (CUDA_VERSION set, NVIDIA_REQUIRE_CUDA not) that leaves NVIDIA_VISIBLE_DEVICES unset
# gets every GPU, and every capability when it leaves NVIDIA_DRIVER_CAPABILITIES unset: CUDA images from
# before those variables existed.
CUDA_VERSION_VARIABLE = "CUDA_VERSION"
REQUIRE_CUDA_VARIABLE = "NVIDIA_REQUIRE_CUDA"
# NVIDIA_DRIVER_CAPABILITIES: a comma list of these, or "all"; unset or empty means the default pair. Only
# utility (NVML, nvidia-smi) and compute (the CUDA libraries, the UVM nodes) have files of ours behind them.
UTILITY, COMPUTE = "utility", "compute"
DRIVER_CAPABILITIES = (COMPUTE, "compat32", "graphics", UTILITY, "video", "display", "ngx")
DEFAULT_DRIVER_CAPABILITIES = (UTILITY, COMPUTE)
CAPABILITIES_ALL = "all"
# Library names (the part before the version) that come with utility; every other library is compute's.
UTILITY_LIBRARIES = ("libnvidia-ml.so",)
# The driver's own libraries (the rest of the native build stands in for the CUDA toolkit's): programs open them
# by their development names too, and a real driver installs each as <name>.<driver version> behind its soname
# link (libcuda.so.1 -> libcuda.so.580.95.05), which tools read the driver version from.
DRIVER_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
# Input bounds, checked before any other work: 64 UUIDs fit in the first.
MAX_VISIBLE_DEVICES_LENGTH = 4096
MAX_CAPABILITIES_LENGTH = 256

# Where things appear inside a container. /run/fakegpu is also the shims' default state folder: processes
# started by `docker exec` do not get the FAKEGPU_DEVICE_TABLE the runtime adds to the main process.
CONTAINER_DIR = "/run/fakegpu"
DEVICE_TABLE_NAME = "devices.tbl"
CATALOG_TABLE_NAME = "catalog.tbl"
CONTAINER_DEVICE_TABLE = CONTAINER_DIR + "/" + DEVICE_TABLE_NAME
CONTAINER_CATALOG_TABLE = CONTAINER_DIR + "/" + CATALOG_TABLE_NAME
CONTAINER_NVIDIA_SMI = "/usr/bin/nvidia-smi"
