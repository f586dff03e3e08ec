"""Locate (or fetch) NVIDIA's CUDA headers that FakeGPU's CUDA libraries compile against; print the -I flags.

NVIDIA's headers are never committed. For the CUDA 13 set (--cuda 13, the default), in order of preference:
1. the CUDA 13 headers a PyPI CUDA torch install brings (site-packages/nvidia/cu13/include, nvidia/nccl/include)
   in the Python that runs this script (`make` installs torch into the venv first); cupti.h among them, which
   both sets' libcupti compile against;
2. else the header-carrying wheels, downloaded from PyPI with pip into --dest/dl and unpacked (headers only).
`crt/host_defines.h`, which cuda_runtime_api.h includes, is not in the runtime wheel since CUDA 13: it comes
from the small nvidia-cuda-crt wheel in both cases.

The CUDA 12 set (--cuda 12) compiles against CUDA 12.8, the CUDA of PyPI's last cu12 torch (2.10.0+cu128): the
-cu12 wheels, always downloaded (the build venv holds the CUDA 13 torch). In 12.x `crt/` ships in the nvcc wheel
and cuda_fp16.h (included by cublas_api.h) needs CCCL's <nv/target>, hence two more wheels. NCCL's header is not
needed: libnccl.so.2 is one library for both sets.

Writes the flags to --dest/flags and prints them. Used by native/Makefile.
"""

from __future__ import annotations

import argparse
import glob
import subprocess
import sys
import zipfile
from pathlib import Path

# Pinned to what torch 2.15.0+cu132 installs; only used when no torch install provides the headers.
WHEELS = {
    "crt": "nvidia-cuda-crt==13.2.86",
    "runtime": "nvidia-cuda-runtime==13.2.86",
    "cublas": "nvidia-cublas==13.4.1.3",
    "cupti": "nvidia-cuda-cupti==13.2.86",  # cupti.h: libcupti's activity API, both sets (native/cuda/cuda.mk)
    "nccl": "nvidia-nccl-cu13==2.30.7",
}
# What torch 2.10.0+cu128 installs (nvidia-cuda-runtime-cu12 12.8.90, nvidia-cublas-cu12 12.8.4.1).
WHEELS12 = {
    "crt": "nvidia-cuda-nvcc-cu12==12.8.93",
    "runtime": "nvidia-cuda-runtime-cu12==12.8.90",
    "cccl": "nvidia-cuda-cccl-cu12==12.8.90",
    "cublas": "nvidia-cublas-cu12==12.8.4.1",
}


def find_installed(rel: str) -> Path | None:
    for entry in sys.path:
        p = Path(entry) / rel
        if p.is_file():
            return p.parent
    return None


def fetch(spec: str, dest: Path, out: Path, only: str = "") -> None:
    """pip download one wheel and unpack its include/ tree into out (nvidia/<pkg>/include/... -> out/...);
    with `only`, just the members under include/<only>."""
    dl = dest / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_")
    found = sorted(glob.glob(str(dl / f"{name}-*.whl")))
    if not found:
        print(f"cuda_headers: fetching {spec} from PyPI", file=sys.stderr)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(dl),
                spec,
            ],
            check=True,
        )
        found = sorted(glob.glob(str(dl / f"{name}-*.whl")))
    with zipfile.ZipFile(found[-1]) as z:
        for member in z.namelist():
            parts = member.split("/")
            if "include" in parts and not member.endswith("/"):
                rel = parts[parts.index("include") + 1 :]
                if only and not "/".join(rel).startswith(only):
                    continue
                target = out.joinpath(*rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(member))


def headers12(dest: Path) -> int:
    folders = []
    for key, only in (("crt", "crt/"), ("runtime", ""), ("cccl", ""), ("cublas", "")):
        folder = dest / f"{key}-include"
        marker = dest / f".{key}-unpacked"
        if not marker.is_file():
            fetch(WHEELS12[key], dest, folder, only)
            marker.write_text(WHEELS12[key] + "\n", encoding="utf-8")
        folders.append(folder)
    flags = " ".join(f"-I{f}" for f in folders)
    (dest / "flags").write_text(flags + "\n", encoding="utf-8")
    print(flags)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, required=True, help="folder for downloaded wheels and unpacked headers")
    ap.add_argument("--cuda", type=int, choices=(12, 13), default=13, help="CUDA major of the header set")
    args = ap.parse_args(argv)
    dest = args.dest.resolve()
    if args.cuda == 12:
        return headers12(dest)
    crt = dest / "crt-include"
    if not (crt / "crt" / "host_defines.h").is_file():
        fetch(WHEELS["crt"], dest, crt)
    cuda = find_installed("nvidia/cu13/include/cuda_runtime_api.h")
    nccl = find_installed("nvidia/nccl/include/nccl.h")
    if cuda is None or not all((cuda / h).is_file() for h in ("cublasLt.h", "cuda.h", "cupti.h")):
        cuda = dest / "cuda-include"
        if not (cuda / "cublasLt.h").is_file():
            fetch(WHEELS["runtime"], dest, cuda)
            fetch(WHEELS["cublas"], dest, cuda)
        if not (cuda / "cupti.h").is_file():
            fetch(WHEELS["cupti"], dest, cuda)
    if nccl is None:
        nccl = dest / "nccl-include"
        if not (nccl / "nccl.h").is_file():
            fetch(WHEELS["nccl"], dest, nccl)
    flags = f"-I{crt} -I{cuda} -I{nccl}"
    (dest / "flags").write_text(flags + "\n", encoding="utf-8")
    print(flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
