"""Prints each GPU's memory through NVML, as a monitoring sidecar would (the example analyze-repo judges: native,
started by the Dockerfile on a CUDA image: container)."""

import pynvml


def main() -> None:
    pynvml.nvmlInit()
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        print(pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetMemoryInfo(handle).total >> 20, "MiB")


if __name__ == "__main__":
    main()
