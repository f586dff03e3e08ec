"""Where torch releases differ in what their CUDA build allocates, as the first release known to do it. No torch.

Each fact names the releases it was measured on. Releases in between that were not measured are treated like the
later one (a guess, stated where it is made).
"""

from __future__ import annotations

import re

Release = tuple[int, int]

# (Per-call cuBLAS workspaces from 2.15 are a workspace profile's figure: fakegpu/profiles/workspace_profiles.yaml.)
# memory-efficient attention without dropout keeps its philox seed and offset as int64 device scalars: native mode
# (PyTorch's own CUDA path) shows them with 2.15, not with 2.11 (A100 and H200 alike); 2.12-2.14 not measured
EFFICIENT_ATTENTION_DEVICE_RNG: Release = (2, 15)
# cuDNN attention refuses a dropout probability that is not a multiple of 1/16: native mode with 2.15 picks flash
# for p=0.1 on an H200, 2.11 picks cuDNN; 2.12-2.14 not measured
CUDNN_ATTENTION_DROPOUT_SIXTEENTHS: Release = (2, 15)


def release(torch_version: str) -> Release:
    """major.minor of a torch version string (local tags and dev suffixes ignored); (0, 0) when unreadable."""
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    return (int(match[1]), int(match[2])) if match else (0, 0)
