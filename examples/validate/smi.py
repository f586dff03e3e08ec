"""Prints what nvidia-smi says of the GPUs: `fakegpu validate` puts FakeGPU's nvidia-smi first on the PATH."""

import subprocess

query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
print(subprocess.run(query, capture_output=True, text=True, check=True).stdout, end="")
