"""Print, as one JSON object, every place a process learns the driver from: NVML's driver and CUDA versions,
cuDriverGetVersion, the nvidia-smi banner, /proc/driver/nvidia/version and the driver libraries' file names.
Standard library only: it runs in a bare Debian container and on the host alike."""

import ctypes
import glob
import json
import os
import re
import subprocess

out = {}
nvml = ctypes.CDLL("libnvidia-ml.so.1")
buf, n = ctypes.create_string_buffer(96), ctypes.c_int()
assert nvml.nvmlInit_v2() == 0
assert nvml.nvmlSystemGetDriverVersion(buf, 96) == 0 and nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(n)) == 0
out["nvml_driver"], out["nvml_cuda"] = buf.value.decode(), n.value
cuda, v = ctypes.CDLL("libcuda.so.1"), ctypes.c_int()
assert cuda.cuDriverGetVersion(ctypes.byref(v)) == 0
out["cuda_driver"] = v.value
banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=True).stdout
m = re.search(r"Driver Version: (\S+)\s+CUDA Version: (\S+)", banner)
out["smi_driver"], out["smi_cuda"] = (m.group(1), m.group(2)) if m else (None, None)
try:
    with open("/proc/driver/nvidia/version") as f:
        words = f.readline().split()
    out["proc_driver"] = next(w for w in words if re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", w))
except (OSError, StopIteration):
    out["proc_driver"] = None
out["proc_gpus"] = sorted(os.listdir("/proc/driver/nvidia/gpus")) if os.path.isdir("/proc/driver/nvidia/gpus") \
    else None
names = set()
for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
    for path in glob.glob(f"{folder}/libcuda.so.*") + glob.glob(f"{folder}/libnvidia-ml.so.*"):
        names.add(os.path.basename(path))
out["library_names"] = sorted(names)
print(json.dumps(out))
