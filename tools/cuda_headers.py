"""Locate (or fetch) NVIDIA's CUDA headers that FakeGPU's CUDA libraries compile against; print the -I flags.

NVIDIA's headers are never committed. In order of preference:
1. the CUDA 13 headers a PyPI CUDA torch install brings (site-packages/nvidia/cu13/include, nvidia/nccl/include)
   in the Python that runs this script (`make` installs torch into the venv first);
2. else the header-carrying wheels, downloaded from PyPI with pip into --dest/dl and unpacked (headers only).
`crt/host_defines.h`, which cuda_runtime_api.h includes, is not in the runtime wheel since CUDA 13: it comes
from the small nvidia-cuda-crt wheel in both cases.

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
    "nccl": "nvidia-nccl-cu13==2.30.7",
}


def find_installed(rel: str) -> Path | None:
    for entry in sys.path:
        p = Path(entry) / rel
        if p.is_file():
            return p.parent
    return None


def fetch(spec: str, dest: Path, out: Path) -> None:
    """pip download one wheel and unpack its include/ tree into out (nvidia/<pkg>/include/... -> out/...)."""
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
                target = out.joinpath(*rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(member))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, required=True, help="folder for downloaded wheels and unpacked headers")
    args = ap.parse_args(argv)
    dest = args.dest.resolve()
    crt = dest / "crt-include"
    if not (crt / "crt" / "host_defines.h").is_file():
        fetch(WHEELS["crt"], dest, crt)
    cuda = find_installed("nvidia/cu13/include/cuda_runtime_api.h")
    nccl = find_installed("nvidia/nccl/include/nccl.h")
    if cuda is None or not (cuda / "cublasLt.h").is_file() or not (cuda / "cuda.h").is_file():
        cuda = dest / "cuda-include"
        if not (cuda / "cublasLt.h").is_file():
            fetch(WHEELS["runtime"], dest, cuda)
            fetch(WHEELS["cublas"], dest, cuda)
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
