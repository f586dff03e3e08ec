"""analyze-kernel against NVIDIA's own tools: kernels of ours (tests/data/kernels/kernels.cu: a template, launch
bounds, static and dynamic shared memory, local memory, __constant__ data, tensor cores) compiled by nvcc for
sm_75, sm_80 and sm_90a, and every kernel's registers, shared memory, stack, local memory and parameter bank
compared with `cuobjdump --dump-resource-usage` exactly; the fatbinary listings with `cuobjdump -lelf -lptx`; and
a real library nobody here wrote (PyPI torch's libtorch_cuda_linalg.so)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.analyze.elf import read_layout
from fakegpu.analyze.kernel import analyze_kernels
from fakegpu.analyze.kernel import fatbin as fatbin_module
from fakegpu.reports import validate
from tests.analyze.conftest import REPO, runner
from tests.native_cuda.conftest import _require

pytestmark = pytest.mark.cuda_tools
NVIDIA = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / \
    "nvidia"
TOOLS = NVIDIA / "cu13" / "bin"
SOURCE = REPO / "tests" / "data" / "kernels" / "kernels.cu"
TORCH_LINALG = NVIDIA.parent / "torch" / "lib" / "libtorch_cuda_linalg.so"
ARCHS = ("sm_75", "sm_80", "sm_90a")


def _tool(*cmd: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "PATH": f"{TOOLS}:{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compiled once for the module: a cubin per architecture, a fatbinary (two SASS images and a PTX), one
    with LZ4-compressed PTX, and the sm_90a PTX."""
    for tool in ("nvcc", "cuobjdump"):
        _require(f"no {tool} at {TOOLS}: the test extra installs it (nvidia-cuda-nvcc, nvidia-cuda-cuobjdump)",
                 (TOOLS / tool).is_file())
    out = tmp_path_factory.mktemp("kernels")
    for arch in ARCHS:
        _tool("nvcc", "-cubin", f"-arch={arch}", "-o", f"{arch}.cubin", str(SOURCE), cwd=out)
    gencode = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=[sm_80,compute_80]"]
    _tool("nvcc", "-fatbin", *gencode, "-o", "multi.fatbin", str(SOURCE), cwd=out)
    _tool("nvcc", "-fatbin", "--compress-mode=speed", *gencode, "-o", "lz4.fatbin", str(SOURCE), cwd=out)
    _tool("nvcc", "-ptx", "-arch=sm_90a", "-o", "sm_90a.ptx", str(SOURCE), cwd=out)
    _tool("nvcc", "-c", "-rdc=true", "-arch=sm_86", "-o", "relocatable.o", str(SOURCE), cwd=out)
    return out


def _resource_usage(path: Path) -> list[dict[str, dict[str, int]]]:
    """cuobjdump's per-ELF resource listing: for each ELF image in order, kernel name -> {REG, SHARED, ...}."""
    images: list[dict[str, dict[str, int]]] = []
    for line in _tool("cuobjdump", "--dump-resource-usage", str(path)).splitlines():
        if line.startswith("Resource usage:"):
            images.append({})
        elif (found := re.match(r"\s*Function (\S+):", line)) and images:
            current = found.group(1)
        elif line.strip().startswith("REG:") and images:
            images[-1][current] = {k: int(v) for k, v in re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line)}
    return images


def _mine(kernel: dict) -> dict[str, int]:
    return {"REG": kernel["registers"], "SHARED": kernel["shared_bytes"], "STACK": kernel["stack_bytes"],
            "LOCAL": kernel["local_bytes"], "CONSTANT[0]": kernel["constant0_bytes"]}


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_of_a_cubin_matches_cuobjdump(built: Path, arch: str) -> None:
    path = built / f"{arch}.cubin"
    theirs, = _resource_usage(path)
    report = analyze_kernels([path])
    f, = report["files"]
    assert f["kind"] == "cubin" and f["problems"] == [] and [i["arch"] for i in f["images"]] == [arch]
    mine = {k["name"]: _mine(k) for k in f["kernels"]}
    assert len(mine) >= 11 and set(mine) == set(theirs)
    for name, usage in theirs.items():
        assert mine[name] == {k: usage[k] for k in mine[name]}, name
    # the template's two instantiations and the launch-bounded kernels are among them
    assert {"_Z9block_sumIfLi256EEvPKT_PS0_i", "_Z9block_sumIdLi512EEvPKT_PS0_i"} <= set(mine)
    bounded = next(k for k in f["kernels"] if k["name"] == "_Z18bounded_polynomialiPKfPf")
    assert bounded["max_threads"] == [256, 1, 1] and bounded["max_registers"] == 64  # 65536 / (256 x 4)
    assert mine["_Z12local_lookupPKiPf"]["STACK"] > 0 and mine["_Z10wide_blockPf"]["SHARED"] >= 4096


def test_a_fatbinary_lists_what_cuobjdump_lists_and_each_image_matches(built: Path) -> None:
    path = built / "multi.fatbin"
    listed = _tool("cuobjdump", "-lelf", "-lptx", str(path))
    theirs = sorted(re.findall(r"\.(sm_\d+a?)\.(cubin|ptx)", listed))
    f, = analyze_kernels([path])["files"]
    mine = sorted((i["arch"].replace("compute_", "sm_"), "cubin" if i["kind"] == "sass" else "ptx")
                  for i in f["images"])
    assert mine == theirs == [("sm_75", "cubin"), ("sm_80", "cubin"), ("sm_80", "ptx")]
    usage = _resource_usage(path)
    sass = [i for i in f["images"] if i["kind"] == "sass"]
    for image, theirs_image in zip(sass, usage, strict=True):
        mine_image = {k["name"]: _mine(k) for k in f["kernels"] if k["arch"] == image["arch"]}
        assert set(mine_image) == set(theirs_image)
        for name, found in theirs_image.items():
            assert mine_image[name] == {k: found[k] for k in mine_image[name]}, (image["arch"], name)


def test_a_relocatable_object_lists_its_kernels_not_its_device_functions(built: Path) -> None:
    """nvcc -c -rdc=true: the SASS sits in the object's __nv_relfatbin section, a relocatable cubin in which
    device functions carry attributes too; only entry symbols are kernels."""
    path = built / "relocatable.o"
    theirs, = _resource_usage(path)
    f, = analyze_kernels([path])["files"]
    assert f["problems"] == [] and [i["arch"] for i in f["images"]] == ["sm_86", "compute_86"]
    mine = {k["name"]: _mine(k) for k in f["kernels"] if k["from"] == "sass"}
    # cuobjdump lists the device functions too: series() and the runtime's double division
    assert set(theirs) - set(mine) == {"_Z6seriesdi", "__cuda_sm20_div_rn_f64_full"} and len(mine) == 11
    for name, usage in mine.items():
        assert usage == {k: theirs[name][k] for k in usage}, name


def test_ptx_kernels_are_the_cubins_kernels_counted_one_by_one(built: Path) -> None:
    ptx, = analyze_kernels([built / "sm_90a.ptx"])["files"]
    cubin, = analyze_kernels([built / "sm_90a.cubin"])["files"]
    assert ptx["problems"] == [] and ptx["images"][0]["arch"] == "compute_90a"
    assert {k["name"] for k in ptx["kernels"]} == {k["name"] for k in cubin["kernels"]}
    by_name = {k["name"]: k for k in ptx["kernels"]}
    assert by_name["_Z9wmma_tilePK6__halfS1_Pf"]["tensor_core"][0]["shape"] == "m16n16k16"
    assert by_name["_Z10wgmma_tileyyPf"]["tensor_core"][0]["shape"] == "m64n8k16"
    assert by_name["_Z5saxpyifPKfPf"]["flops_per_thread"] == 2  # one fma
    assert by_name["_Z12tiled_matmulPKfS0_Pfi"]["flops_per_thread"] is None  # a loop
    assert by_name["_Z12tiled_matmulPKfS0_Pfi"]["shared_bytes"] == 16 * 16 * 4 + 16 * 17 * 4
    assert by_name["_Z15reverse_dynamicPfi"]["dynamic_shared"] is True
    assert by_name["_Z12local_lookupPKiPf"]["local_bytes"] == 192
    assert by_name["_Z18bounded_polynomialiPKfPf"]["directives"] == {"maxntid": [256, 1, 1], "minnctapersm": [4]}
    # per kernel, never summed over the file
    assert by_name["_Z5saxpyifPKfPf"]["virtual_registers"]["f32"] < 10


def test_lz4_compressed_ptx_decodes_to_the_ptx_cuobjdump_extracts(built: Path) -> None:
    f, = analyze_kernels([built / "lz4.fatbin"])["files"]
    ptx = next(i for i in f["images"] if i["kind"] == "ptx")
    assert ptx["compression"] == "lz4" and ptx["read"] and f["problems"] == []
    theirs = re.findall(r"\.entry\s+(\w+)", _tool("cuobjdump", "-ptx", str(built / "lz4.fatbin")))
    assert sorted(k["name"] for k in f["kernels"] if k["from"] == "ptx") == sorted(theirs)


def test_an_sm_90a_only_cubin_cannot_run_on_an_a100_and_says_why(built: Path) -> None:
    result = runner.invoke(_app(), ["analyze-kernel", "--profile", "a100", str(built / "sm_90a.cubin")])
    assert result.exit_code == 0, result.output
    assert "CANNOT RUN: no kernel image for compute capability 8.0: launches fail with " \
           "cudaErrorNoKernelImageForDevice (sm_90a is architecture-specific: it runs on compute capability 9.0 " \
           "only; and there is no PTX the driver could JIT-compile)" in result.stdout
    on_h100 = runner.invoke(_app(), ["analyze-kernel", "--profile", "h100", "--json", str(built / "sm_90a.cubin")])
    data = json.loads(on_h100.stdout)["data"]
    validate(data)
    assert data["files"][0]["on_profile"]["runs"] and data["summary"]["runs_on_profile"] is True
    assert all(k["occupancy"]["launchable"] for k in data["files"][0]["kernels"])


def _app():
    from fakegpu.cli.main import app
    return app


def test_torch_linalg_library_architectures_and_registers_agree_with_cuobjdump() -> None:
    _require(f"no {TORCH_LINALG}: the torch extra installs PyPI's CUDA torch", TORCH_LINALG.is_file())
    _require("no cuobjdump", (TOOLS / "cuobjdump").is_file())
    f, = analyze_kernels([TORCH_LINALG], "h100")["files"]
    listed = re.findall(r"\.(sm_\d+[af]?)\.cubin", _tool("cuobjdump", "-lelf", str(TORCH_LINALG)))
    assert [i["arch"] for i in f["images"] if i["kind"] == "sass"] == listed
    assert f["problems"] == [] and f["on_profile"]["runs"] and f["on_profile"]["images"] == ["sm_90"]
    theirs = _resource_usage(TORCH_LINALG)
    sass = [i for i in f["images"] if i["kind"] == "sass"]
    assert len(theirs) == len(sass) >= 100
    compared = 0
    for image_index in (0, 1, 3, len(sass) - 1):  # a sample of images, every kernel of each
        arch = sass[image_index]["arch"]
        names = set(theirs[image_index])
        mine = {k["name"]: k for k in f["kernels"] if k["arch"] == arch and k["name"] in names}
        assert set(mine) == names
        for name, found in theirs[image_index].items():
            assert (mine[name]["registers"], mine[name]["shared_bytes"]) == (found["REG"], found["SHARED"]), name
            compared += 1
    assert compared >= 20


def test_without_a_zstandard_decoder_compressed_entries_are_listed_not_dropped(monkeypatch) -> None:
    _require(f"no {TORCH_LINALG}", TORCH_LINALG.is_file())
    monkeypatch.setattr(fatbin_module, "_zstd", lambda data, size: None)
    f, = analyze_kernels([TORCH_LINALG])["files"]
    assert f["kernels"] == [] and len(f["images"]) >= 100
    assert all(i["compression"] == "zstd" and not i["read"] for i in f["images"])
    assert all(fatbin_module.ZSTD_MISSING in p for p in f["problems"]) and len(f["problems"]) == len(f["images"])


def test_the_readme_nvcc_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    """The section's compiled example (`$ nvcc ... && fakegpu analyze-kernel ...`), run with its output file in a
    temporary folder rather than /tmp."""
    from tests.readme_examples import printed

    readme = (REPO / "README.md").read_text()
    start = readme.index("## What do these kernels need? `analyze-kernel`")
    section = readme[start:readme.index("\n## ", start + 1)].splitlines()
    at = next(i for i, line in enumerate(section) if line.startswith("    $ nvcc "))
    compile_part, _, command = section[at][len("    $ "):].partition(" && ")
    shown = []
    for line in section[at + 1:]:
        if line and not line.startswith("    "):
            break
        shown.append(line[4:])
    out = str(tmp_path / "scale.fatbin")
    _tool(*compile_part.replace("/tmp/scale.fatbin", out).split(), cwd=REPO)
    expected = "\n".join(shown).strip("\n").replace("/tmp/scale.fatbin", out)
    assert printed(command.replace("/tmp/scale.fatbin", out)) == expected


def test_a_cuda_12_torch_library_lz4_entries_and_the_older_elf_abi_agree_with_cuobjdump() -> None:
    """PyPI's torch 2.10.0+cu128 (the venv `make test` makes): its fatbinaries are LZ4-compressed and its cubins
    up to sm_90 use the ELF ABI before version 8 (the SM in e_flags' low byte); sm_100 and sm_120 the newer."""
    found = sorted(REPO.glob(".venv-torch210/lib/python3*/site-packages/torch/lib/libtorch_cuda_linalg.so"))
    _require("no .venv-torch210 torch: `make .venv-torch210` makes it", bool(found))
    lz4_block = pytest.importorskip("lz4.block")
    path = found[0]
    f, = analyze_kernels([path])["files"]
    sass = [i for i in f["images"] if i["kind"] == "sass"]
    assert f["problems"] == [] and {i["compression"] for i in sass} == {"lz4"}
    assert [i["arch"] for i in sass] == re.findall(r"\.(sm_\d+[af]?)\.cubin", _tool("cuobjdump", "-lelf", str(path)))
    theirs = _resource_usage(path)
    by_arch = {}
    for index, image in enumerate(sass):
        by_arch.setdefault(image["arch"], index)
    assert {"sm_50", "sm_80", "sm_90", "sm_100", "sm_120"} <= set(by_arch)
    # our own LZ4 block decoder gives the lz4 package's bytes on real entries
    section = read_layout(path.open("rb"), str(path))
    blob = section.data(section.named(".nv_fatbin"))
    checked = 0
    for entry in fatbin_module.iter_fatbin(blob, [], decompress=False):
        if entry.compression == "lz4" and checked < 3:
            assert fatbin_module.lz4_block(entry.packed, entry.size_bytes) == \
                lz4_block.decompress(entry.packed, uncompressed_size=entry.size_bytes)
            checked += 1
    assert checked == 3
    for arch in ("sm_50", "sm_80", "sm_90", "sm_100", "sm_120"):
        index = by_arch[arch]
        mine = {k["name"]: k for k in f["kernels"] if k["arch"] == arch}
        assert set(theirs[index]) <= set(mine) and theirs[index], arch
        for name, usage in theirs[index].items():
            assert (mine[name]["registers"], mine[name]["shared_bytes"], mine[name]["stack_bytes"]) == \
                (usage["REG"], usage["SHARED"], usage["STACK"]), (arch, name)
