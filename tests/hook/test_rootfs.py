"""Resolution inside a container root: hostile links never lead out of it (CVE-2024-0132 class)."""

from __future__ import annotations

import os
import shutil
import stat

import pytest
from fakegpu_hook.inject import library_dir, plan_injection
from fakegpu_hook.rootfs import Root, RootfsError

from tests.hook.conftest import DATA


@pytest.fixture
def root_copy(tmp_path):
    def make(case: str):
        dest = tmp_path / "root"
        shutil.copytree(DATA / "rootfs" / case, dest, symlinks=True)
        return dest

    return make


@pytest.fixture
def host_dir(tmp_path):
    """A folder standing for a host path a hostile image aims at; must stay untouched."""
    d = tmp_path / "host-secret"
    d.mkdir()
    (d / "passwd").write_text("root:x:0:0\n")
    return d


def snapshot(path):
    return sorted((p.name, p.read_bytes() if p.is_file() else None) for p in path.iterdir())


@pytest.mark.parametrize("link", ["absolute", "relative"])
def test_symlinked_lib_dir_pointing_out_stays_inside(link, root_copy, host_dir):
    root = root_copy("debian")
    libdir = root / "usr/lib/x86_64-linux-gnu"
    shutil.rmtree(libdir)
    target = str(host_dir) if link == "absolute" else "../../../../../../../../" + str(host_dir).lstrip("/")
    libdir.symlink_to(target)
    before = snapshot(host_dir)
    with Root(str(root)) as r:
        os.close(r.file_target("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
    assert snapshot(host_dir) == before
    # The link was followed the way the container sees it: to <root>/<host_dir>.
    assert (root / str(host_dir).lstrip("/") / "libnvidia-ml.so.1").is_file()


def test_existing_target_symlink_is_replaced_not_followed(root_copy, host_dir):
    root = root_copy("debian")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").symlink_to(host_dir / "passwd")
    with Root(str(root)) as r:
        os.close(r.file_target("/usr/bin/nvidia-smi"))
    assert (host_dir / "passwd").read_text() == "root:x:0:0\n"
    assert not (root / "usr/bin/nvidia-smi").is_symlink() and (root / "usr/bin/nvidia-smi").is_file()


def test_dotdot_stops_at_the_root(root_copy, host_dir):
    root = root_copy("empty")
    with Root(str(root)) as r:
        os.close(r.file_target("/../../../../" + str(host_dir).lstrip("/") + "/x"))
    assert not (host_dir / "x").exists()
    assert (root / str(host_dir).lstrip("/") / "x").is_file()


def test_symlink_loop_is_an_error(root_copy):
    root = root_copy("empty")
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    with Root(str(root)) as r, pytest.raises(RootfsError, match="too many symlinks"):
        r.file_target("/a/file")


def test_file_in_the_way_of_a_directory_is_an_error(root_copy):
    root = root_copy("empty")
    (root / "usr").write_text("not a dir")
    with Root(str(root)) as r, pytest.raises(RootfsError, match="not a directory"):
        r.file_target("/usr/lib/libx.so.1")


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_device_nodes_under_a_dev_link_pointing_out(root_copy, host_dir):
    root = root_copy("empty")
    (root / "dev").symlink_to(host_dir)
    with Root(str(root)) as r:
        kind = r.device_node("/dev/nvidia0", 195, 0)
    assert kind in ("char", "file")
    assert not (host_dir / "nvidia0").exists()
    node = root / str(host_dir).lstrip("/") / "nvidia0"
    st = node.lstat()
    assert stat.S_IMODE(st.st_mode) == 0o666
    if kind == "char":
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195


@pytest.mark.parametrize(("case", "expected"), [("debian", "/usr/lib/x86_64-linux-gnu"), ("musl", "/usr/lib"),
                                                ("empty", "/usr/lib")])
def test_library_dir_follows_the_image_layout(case, expected, root_copy):
    with Root(str(root_copy(case))) as r:
        assert library_dir(r) == expected


def test_plan_mounts_what_the_native_build_has(root_copy, tmp_path):
    native = tmp_path / "native" / "lib"
    native.mkdir(parents=True)
    (native / "libnvidia-ml.so.1").write_bytes(b"\x7fELF")
    (native / "libcuda.so.1").write_bytes(b"\x7fELF")
    (native / "libcuda.so").symlink_to("libcuda.so.1")
    (native / "README").write_text("not a library")
    (native / "catalog.tbl").write_text("catalog")
    with Root(str(root_copy("debian"))) as r:
        plan = plan_injection(r, str(native), str(tmp_path / "native/bin/nvidia-smi"), "/t/devices.tbl",
                              "/t/catalog.tbl", "/t/state", [0, 1])
    d = "/usr/lib/x86_64-linux-gnu"
    # One read-only folder mount of the build; every name the loader looks up is a link into it.
    assert plan.lib_dirs == [(str(native.resolve()), f"{d}/fakegpu")]
    assert [dest for _, dest in plan.files] == ["/run/fakegpu/devices.tbl"]
    assert plan.dirs == [("/t/state", "/run/fakegpu")]
    assert sorted(plan.links) == [(f"{d}/catalog.tbl", "fakegpu/catalog.tbl"), (f"{d}/libcuda.so", "libcuda.so.1"),
                                  (f"{d}/libcuda.so.1", "fakegpu/libcuda.so.1"),
                                  (f"{d}/libnvidia-ml.so", "libnvidia-ml.so.1"),
                                  (f"{d}/libnvidia-ml.so.1", "fakegpu/libnvidia-ml.so.1")]
    assert not any("libnvidia-ml.so.1" in n for n in plan.notes)
    assert any("nvidia-smi" in n for n in plan.notes)
    assert [n[0] for n in plan.nodes] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                          "/dev/nvidia0", "/dev/nvidia1"]


def test_plan_mounts_a_library_linked_from_outside_the_build_folder(root_copy, tmp_path):
    # A link out of the build folder would dangle through the folder mount: that library keeps a file mount.
    native = tmp_path / "native" / "lib"
    native.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere" / "libnvidia-ml.so.1.2"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"\x7fELF")
    (native / "libnvidia-ml.so.1").symlink_to(elsewhere)
    (native / "libcuda.so.1").write_bytes(b"\x7fELF")
    with Root(str(root_copy("debian"))) as r:
        plan = plan_injection(r, str(native), str(tmp_path / "smi"), "/t/d", "/t/c", "/t/s", [0])
    d = "/usr/lib/x86_64-linux-gnu"
    assert plan.lib_dirs == [(str(native.resolve()), f"{d}/fakegpu")]
    assert (str(elsewhere), f"{d}/libnvidia-ml.so.1") in plan.files
    assert sorted(plan.links) == [(f"{d}/libcuda.so", "libcuda.so.1"), (f"{d}/libcuda.so.1", "fakegpu/libcuda.so.1"),
                                  (f"{d}/libnvidia-ml.so", "libnvidia-ml.so.1")]


def test_plan_without_native_build_says_so(root_copy, tmp_path):
    with Root(str(root_copy("musl"))) as r:
        plan = plan_injection(r, str(tmp_path / "none"), str(tmp_path / "none/smi"), "/t/d", "/t/c", "/t/s", [0])
    assert [dest for _, dest in plan.files] == ["/run/fakegpu/devices.tbl"]
    assert any("libnvidia-ml.so.1" in n for n in plan.notes)


@pytest.mark.parametrize(("capabilities", "libraries", "smi", "uvm"), [
    (("utility",), ["catalog.tbl", "libnvidia-ml.so", "libnvidia-ml.so.1"], True, False),
    (("compute",), ["catalog.tbl", "libcuda.so", "libcuda.so.1", "libcudart.so.13"], False, True),
    (("utility", "compute"), ["catalog.tbl", "libcuda.so", "libcuda.so.1", "libcudart.so.13", "libnvidia-ml.so",
                              "libnvidia-ml.so.1"], True, True),
    (("video", "graphics"), [], False, False),
])
def test_capabilities_decide_what_is_mounted(capabilities, libraries, smi, uvm, root_copy, tmp_path):
    native = tmp_path / "native" / "lib"
    native.mkdir(parents=True)
    for name in ("libnvidia-ml.so.1", "libcuda.so.1", "libcudart.so.13", "catalog.tbl"):
        (native / name).write_bytes(b"\x7fELF")
    (native / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    (tmp_path / "native" / "bin").mkdir()
    (tmp_path / "native" / "bin" / "nvidia-smi").write_text("#!/bin/sh\n")
    with Root(str(root_copy("debian"))) as r:
        plan = plan_injection(r, str(native), str(tmp_path / "native/bin/nvidia-smi"), "/t/d", "/t/c", "/t/s",
                              [1, 3], capabilities)
    assert sorted(p.rsplit("/", 1)[1] for p, _ in plan.links) == libraries
    assert (("/usr/bin/nvidia-smi" in [d for _, d in plan.files]) == smi and
            ("/run/fakegpu/devices.tbl" in [d for _, d in plan.files]))
    # The host's minor numbers, as NVIDIA's runtime makes /dev/nvidiaN of the GPUs it hands a container.
    nodes = [(path, minor) for path, _, minor in plan.nodes]
    assert nodes == [("/dev/nvidiactl", 255), *([("/dev/nvidia-uvm", 0), ("/dev/nvidia-uvm-tools", 1)] if uvm else []),
                     ("/dev/nvidia1", 1), ("/dev/nvidia3", 3)]
    assert not plan.notes


def test_cached_folders_resolve_once_and_close(root_copy, host_dir):
    root_path = root_copy("debian")
    (root_path / "usr" / "link-out").symlink_to(host_dir)
    with Root(str(root_path), cache_dirs=True) as root:
        first = root.open_dir("/usr/lib/x86_64-linux-gnu")
        second = root.open_dir("usr/lib/x86_64-linux-gnu/")
        assert first != second and os.path.samestat(os.fstat(first), os.fstat(second))
        os.close(first)
        os.close(second)
        os.close(root.file_target("/usr/link-out/x"))  # followed inside the root, cached like any folder
        cached = root.open_dir("/usr/link-out")
        assert os.path.samestat(os.fstat(cached), os.stat(root_path / str(host_dir).lstrip("/")))
        os.close(cached)
        opened = len(os.listdir("/proc/self/fd"))
    assert len(os.listdir("/proc/self/fd")) < opened
    assert snapshot(host_dir) == [("passwd", b"root:x:0:0\n")]


def test_plan_gives_development_links_to_the_driver_libraries_only(root_copy, tmp_path):
    native = tmp_path / "native" / "lib"
    native.mkdir(parents=True)
    for name in ("libcuda.so.1", "libnvidia-ml.so.1", "libcublas.so.13"):
        (native / name).write_bytes(b"\x7fELF")
    with Root(str(root_copy("debian"))) as r:
        plan = plan_injection(r, str(native), str(tmp_path / "smi"), "/t/d", "/t/c", "/t/s", [0])
    d = "/usr/lib/x86_64-linux-gnu"
    assert sorted(p for p, _ in plan.links) == [f"{d}/libcublas.so.13", f"{d}/libcuda.so", f"{d}/libcuda.so.1",
                                                f"{d}/libnvidia-ml.so", f"{d}/libnvidia-ml.so.1"]
