"""Telemetry following work: nvidia-smi's utilization, power and SM clock of cuda:0 before, during and after a
loop of kernels (cuda:1 stays idle throughout). Prints one JSON line."""

import json
import subprocess
import threading
import time

import torch


def query():
    out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,power.draw,clocks.sm,temperature.gpu",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
    return [[float(v) for v in line.split(",")] for line in out.strip().splitlines()]


x = torch.ones(1 << 20, device="cuda:0")
torch.cuda.synchronize()
time.sleep(1.2)  # the setup's own launches leave the window
before = query()
stop = threading.Event()
during = []


def watch():
    time.sleep(1.5)
    during.extend(query())
    stop.set()


# The loop stays on the main thread: fakecuda's dispatch mode, like every torch mode, is per thread.
watcher = threading.Thread(target=watch)
watcher.start()
y = x
while not stop.is_set():
    y = y * 1.0001 + 0.5  # elementwise kernels: a launch every few microseconds of CPU time
torch.cuda.synchronize()
watcher.join()
time.sleep(1.3)
after = query()
print(json.dumps({"before": before, "during": during, "after": after}))
