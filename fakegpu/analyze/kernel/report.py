"""One input file to its analyze-kernel entry: what kind of file it is (by content, then by name), its device code
images and kernels, what could not be read, and, for a profile, occupancy per kernel and whether it runs there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fakegpu.analyze.elf import EM_CUDA, NotELF, read_layout
from fakegpu.analyze.kernel import compat
from fakegpu.analyze.kernel.cubin import Cubin, CubinError, parse_cubin
from fakegpu.analyze.kernel.fatbin import FATBIN_MAGIC, Entry, FatbinError, iter_fatbin
from fakegpu.analyze.kernel.occupancy import Limits, occupancy
from fakegpu.analyze.kernel.ptx import PtxError, parse_ptx
from fakegpu.analyze.kernel.source import scan_source

SCHEMA = "fakegpu.analyze-kernel/v1"
DEFAULT_BLOCK = 256  # threads per block when neither the kernel's launch bounds nor --block-size say
SOURCE_SUFFIXES = (".cu", ".cuh")
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")


def _sass_kernel(cubin: Cubin, arch: str) -> list[dict[str, Any]]:
    return [{"name": k.name, "from": "sass", "arch": arch, "registers": k.registers, "shared_bytes": k.shared_bytes,
             "stack_bytes": k.stack_bytes, "local_bytes": k.local_bytes, "frame_bytes": k.frame_bytes,
             "constant0_bytes": k.constant0_bytes, "param_bytes": k.param_bytes, "max_threads": k.max_threads,
             "required_threads": k.required_threads, "max_registers": k.max_registers, "code_bytes": k.code_bytes,
             "shared_includes_reserved": cubin.reserved_shared_in_binary and k.shared_bytes > 0}
            for k in cubin.kernels]


def _ptx_entry(text: str, arch: str | None, problems: list[str], where: str) -> tuple[dict[str, Any], list]:
    try:
        ptx = parse_ptx(text)
    except PtxError as exc:
        problems.append(f"{where}: {exc}")
        return {"kind": "ptx", "arch": arch, "ptx_version": None, "read": False, "problem": str(exc)}, []
    for p in ptx.problems:
        problems.append(f"{where}:{p['line']}: {p['message']}")
    target = next((t for t in ptx.target if t.startswith("sm_")), None)
    arch = arch or (f"compute_{target[3:]}" if target else None)
    kernels = [{"name": k.name, "from": "ptx", "arch": arch, "line": k.line, "params": k.params,
                "virtual_registers": k.registers, "shared_bytes": k.shared_bytes, "dynamic_shared": k.dynamic_shared,
                "local_bytes": k.local_bytes, "directives": k.directives,
                "max_threads": k.directives.get("maxntid") or k.directives.get("reqntid"),
                "instructions": dict(k.instructions.most_common()), "tensor_core": k.tensor,
                "flops_per_thread": k.flops_per_thread,
                "flops_note": None if k.flops_per_thread is not None else
                ("a loop (backward branch at line " + ", ".join(map(str, k.loops[:3])) + ")" if k.loops else
                 "calls " + ", ".join(k.calls[:3])) + ": the count depends on run-time values"}
               for k in ptx.kernels]
    image = {"kind": "ptx", "arch": arch, "ptx_version": ptx.version, "read": True,
             "problem": f"{len(ptx.problems)} statement(s) not understood" if ptx.problems else None}
    return image, kernels


def _cubin_entry(blob: bytes, label: str, problems: list[str], arch: str | None = None
                 ) -> tuple[dict[str, Any], list]:
    try:
        cubin = parse_cubin(blob, label)
    except (NotELF, CubinError) as exc:
        problems.append(str(exc))
        return {"kind": "sass", "arch": arch, "ptx_version": None, "read": False, "problem": str(exc)}, []
    arch = arch or cubin.arch
    return {"kind": "sass", "arch": arch, "ptx_version": None, "read": True, "problem": None,
            "constant_bytes": cubin.constant_bytes}, _sass_kernel(cubin, arch)


def _fatbin_entries(blob: bytes, label: str, problems: list[str]) -> tuple[list[dict], list[dict]]:
    found: list[str] = []
    images: list[dict[str, Any]] = []
    kernels: list[dict[str, Any]] = []
    try:
        for e in iter_fatbin(blob, found):
            _fatbin_entry(e, label, problems, images, kernels)
    except FatbinError as exc:
        problems.append(f"{label}: {exc}")
    problems += [f"{label}: {p}" for p in found]
    return images, kernels


def _fatbin_entry(e: Entry, label: str, problems: list[str], images: list[dict], kernels: list[dict]) -> None:
    where = f"{label} entry {e.container}.{e.index} ({e.arch})"
    if e.payload is None:
        images.append({"kind": e.kind, "arch": e.arch, "ptx_version": e.ptx_version, "read": False,
                       "compression": e.compression, "problem": e.problem})
        problems.append(f"{where}: {e.problem}")
        return
    if e.kind == "sass":
        image, found_kernels = _cubin_entry(e.payload, where, problems, e.arch)
    elif e.kind == "ptx":
        image, found_kernels = _ptx_entry(e.payload.decode("utf-8", "replace"), e.arch, problems, where)
    else:
        image, found_kernels = {"kind": e.kind, "arch": e.arch, "ptx_version": None, "read": False,
                                "problem": "an entry kind this reader does not know"}, []
    image["compression"] = e.compression
    images.append(image)
    kernels += found_kernels


def _binary(path: Path, problems: list[str]) -> tuple[str, list[dict], list[dict]]:
    with path.open("rb") as f:
        head = f.read(4)
        if head == FATBIN_MAGIC.to_bytes(4, "little"):
            f.seek(0)
            images, kernels = _fatbin_entries(f.read(), str(path), problems)
            return "fatbin", images, kernels
        layout = read_layout(f, str(path))
        if layout.machine == EM_CUDA:
            f.seek(0)
            image, kernels = _cubin_entry(f.read(), str(path), problems)
            return "cubin", [image], kernels
        sections = [s for s in layout.sections if s.name in FATBIN_SECTIONS]
        if not sections:
            problems.append(f"{path}: an ELF file with no CUDA device code (no {' or '.join(FATBIN_SECTIONS)} "
                            "section)")
            return "elf", [], []
        images, kernels = [], []
        for section in sections:
            found_images, found_kernels = _fatbin_entries(layout.data(section), f"{path} {section.name}", problems)
            images += found_images
            kernels += found_kernels
        return "elf", images, kernels


def read_file(path: Path) -> dict[str, Any]:
    """The entry of one input: kind, images, kernels, launches (source), problems."""
    problems: list[str] = []
    entry: dict[str, Any] = {"path": str(path), "kind": None, "images": [], "kernels": [], "launches": [],
                             "problems": problems}
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as exc:
        problems.append(f"{path}: cannot be read: {exc.strerror or exc}")
        return entry
    try:
        if head[:4] == b"\x7fELF" or head == FATBIN_MAGIC.to_bytes(4, "little"):
            entry["kind"], entry["images"], entry["kernels"] = _binary(path, problems)
            return entry
    except NotELF as exc:
        entry["kind"] = "elf"
        problems.append(str(exc))
        return entry
    text = path.read_bytes().decode("utf-8", "replace")
    if path.suffix in SOURCE_SUFFIXES or (path.suffix != ".ptx" and "__global__" in text):
        entry["kind"] = "cuda-source"
        found = scan_source(text)
        entry["kernels"] = [{"name": k.name, "from": "source", "line": k.line, "template": k.template,
                             "launch_bounds": k.launch_bounds, "instantiations": k.instantiations}
                            for k in found.kernels]
        entry["launches"] = [{"kernel": launch.kernel, "line": launch.line, "how": launch.how,
                              "config": launch.config, "template_args": launch.template_args}
                             for launch in found.launches]
        return entry
    if path.suffix == ".ptx" or re.search(r"^\s*\.version\s", text, re.M):
        entry["kind"] = "ptx"
        image, kernels = _ptx_entry(text, None, problems, str(path))
        entry["images"], entry["kernels"] = [image], kernels
        return entry
    entry["kind"] = "unknown"
    problems.append(f"{path}: not CUDA source (.cu, .cuh), PTX, a cubin, a fatbinary or an ELF file with device code")
    return entry


def _block(kernel: dict[str, Any], block_size: int | None) -> tuple[int, str]:
    if block_size:
        return block_size, "--block-size"
    bound = kernel.get("required_threads") or kernel.get("max_threads")
    if bound:
        threads = 1
        for n in bound:
            threads *= max(n, 1)
        return threads, "the kernel's launch bounds"
    return DEFAULT_BLOCK, f"default ({DEFAULT_BLOCK}; --block-size sets it)"


def judge(entry: dict[str, Any], profile: Any, block_size: int | None, dynamic_shared: int) -> None:
    """Add whether the file's device code runs on `profile` and each runnable SASS kernel's occupancy there."""
    if entry["kind"] == "cuda-source" or not entry["images"]:
        entry["on_profile"] = None
        return
    device = profile.compute_capability
    sass = [i["arch"] for i in entry["images"] if i["kind"] == "sass" and i["arch"]]
    ptx = [i["arch"] for i in entry["images"] if i["kind"] == "ptx" and i["arch"]]
    verdict = compat.verdict(sass, ptx, device)
    if any(not i["read"] for i in entry["images"]):
        verdict["why"] += " (images that could not be read are counted by their headers)"
    entry["on_profile"] = verdict
    cc = f"{device[0]}.{device[1]}"
    limits = Limits.of(cc, profile.data["sm_limits"])
    chosen = compat.best_sass(verdict["images"], device) if verdict["how"] == "sass" else None
    for kernel in entry["kernels"]:
        if kernel["from"] != "sass" or kernel["arch"] != chosen:
            kernel["occupancy"] = None
            continue
        if limits is None or kernel["registers"] is None:
            kernel["occupancy"] = {"launchable": None, "why": f"no allocation rules for compute capability {cc}"
                                   if limits is None else "the cubin names no register count"}
            continue
        threads, basis = _block(kernel, block_size)
        result = occupancy(limits, threads, kernel["registers"], kernel["shared_bytes"], dynamic_shared,
                           reserved_included=kernel["shared_includes_reserved"])
        result["block_size_from"] = basis
        bound = kernel.get("max_threads")
        if result["launchable"] and bound and threads > bound[0] * max(bound[1], 1) * max(bound[2], 1):
            shape = "x".join(map(str, bound))
            result.update(launchable=False, blocks_per_sm=0, warps_per_sm=0, occupancy=0.0, limited_by=None,
                          why=f"{threads} threads per block exceed the kernel's launch bounds ({shape}): the launch "
                              "fails (CUDA C++ Programming Guide, Launch Bounds)")
        kernel["occupancy"] = result
    for kernel in entry["kernels"]:
        kernel.setdefault("occupancy", None)
