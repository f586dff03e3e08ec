"""`fakegpu fault inject --container` without Docker (fakegpu/faults/inject.py): the container's folders under a
state root laid out as the runtime lays them (fakegpu_hook.statedir), the container's numbering, and the board
refusing what a container's processes can plant in their state folder. tests/container/test_fault_inject_docker.py
runs it against a real container."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakegpu_hook.contract import DEVICE_TABLE_NAME
from fakegpu_hook.statedir import CONTAINER_STATE, shared_state_dir

from fakegpu.devices import resolve_devices
from fakegpu.devices.table import write_table
from fakegpu.errors import EXIT_USAGE
from fakegpu.faults import board
from fakegpu.faults.inject import ContainerLayout, ContainerNotUsable, container_run, inject_container
from fakegpu.faults.plan import InvalidFaultPlan, parse_flag

CID = "c0ffee" * 10 + "abcd"


@dataclass
class FakeContainer:
    id: str
    name: str
    status: str = "running"


class FakeClient:
    """The two calls of the Docker SDK that inject_container makes."""

    def __init__(self, *found: FakeContainer) -> None:
        self.found = {c.name: c for c in found}
        self.containers = self

    def get(self, name_or_id: str) -> FakeContainer:
        import docker

        for c in self.found.values():
            if name_or_id in (c.name, c.id):
                return c
        raise docker.errors.NotFound(f"No such container: {name_or_id}")

    def list(self, all: bool = False) -> list[FakeContainer]:
        return list(self.found.values())


@pytest.fixture
def layout(tmp_path: Path) -> ContainerLayout:
    """A state root with one container whose two GPUs are the inventory's GPUs 2 and 0 (its GPU 0 is host 2)."""
    root = str(tmp_path / "root")
    host = _container_dir(root)
    inventory = resolve_devices("a100:3", seed="0")
    write_table(os.path.join(host, DEVICE_TABLE_NAME), [inventory[2], inventory[0]], "a100:3", "0")
    return ContainerLayout(root, CONTAINER_STATE, DEVICE_TABLE_NAME)


def _container_dir(root: str) -> str:
    # make_container_dir insists on a nosuid,nodev,noexec state root, which tmp_path need not be: its layout by hand.
    host = os.path.join(root, CID)
    os.makedirs(shared_state_dir(host))
    os.chmod(root, 0o700)
    os.chmod(host, 0o700)
    os.chmod(shared_state_dir(host), 0o1777)
    return host


def _table_uuids(root: str) -> list[str]:
    from fakegpu.devices.table import table_uuids

    return table_uuids(os.path.join(root, CID, "devices.tbl"))


def test_injects_in_the_containers_numbering(layout):
    client = FakeClient(FakeContainer(CID, "trainer"))
    done = inject_container(parse_flag("xid=79,device=1"), "trainer", layout, client)
    state = shared_state_dir(os.path.join(layout.state_root, CID))
    assert done.state_dir == state and done.container == "trainer"
    (record,) = board.read(state)
    assert record.device == 1 and record.code == 79 and record.lost
    assert done.uuid == _table_uuids(layout.state_root)[1]
    # Every user of the container reads the board, whatever the injector's umask.
    assert stat.S_IMODE(os.stat(board.board_path(state)).st_mode) == 0o644


def test_a_uuid_names_the_containers_gpu(layout):
    uuid0 = _table_uuids(layout.state_root)[0]
    done = inject_container(parse_flag(f"xid=13,device={uuid0}"), CID, layout, FakeClient(FakeContainer(CID, "t")))
    assert done.record.device == 0 and not done.record.lost


def test_a_gpu_the_container_lacks_is_refused(layout):
    with pytest.raises(InvalidFaultPlan, match=r"GPUs 0\.\.1"):
        inject_container(parse_flag("xid=79,device=2"), "t", layout, FakeClient(FakeContainer(CID, "t")))


def test_unknown_container_names_a_close_match(layout):
    with pytest.raises(ContainerNotUsable, match="did you mean trainer") as err:
        inject_container(parse_flag("xid=79,device=1"), "trainr", layout, FakeClient(FakeContainer(CID, "trainer")))
    assert err.value.exit_code == EXIT_USAGE


def test_stopped_and_plain_containers_are_refused(layout):
    stopped = FakeClient(FakeContainer(CID, "t", status="exited"))
    with pytest.raises(ContainerNotUsable, match="is exited, not running"):
        inject_container(parse_flag("xid=79,device=1"), "t", layout, stopped)
    plain = FakeClient(FakeContainer("f" * 64, "plain"))
    with pytest.raises(ContainerNotUsable, match="not a FakeGPU container"):
        inject_container(parse_flag("xid=79,device=1"), "plain", layout, plain)


def test_a_symlinked_board_planted_in_the_state_folder_is_refused(layout, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"host file\n")
    state = shared_state_dir(os.path.join(layout.state_root, CID))
    os.symlink(victim, board.board_path(state))
    with pytest.raises(InvalidFaultPlan, match="symbolic link; refused"):
        inject_container(parse_flag("xid=79,device=1"), "t", layout, FakeClient(FakeContainer(CID, "t")))
    assert victim.read_bytes() == b"host file\n"
    assert sorted(os.listdir(state)) == ["faults.board"]  # no temporary file left behind


def test_a_fifo_or_a_short_file_planted_as_the_board_is_refused(tmp_path):
    os.mkfifo(tmp_path / board.FILE_NAME)
    with pytest.raises(board.UnsafeBoard, match="not a regular file"):
        board.append(str(tmp_path), [board.Record(0, 0, 79)])
    os.unlink(tmp_path / board.FILE_NAME)
    (tmp_path / board.FILE_NAME).write_bytes(board.MAGIC)
    with pytest.raises(board.UnsafeBoard, match="not a regular file"):
        board.append(str(tmp_path), [board.Record(0, 0, 79)])


def test_a_symlinked_state_folder_is_refused(layout, tmp_path):
    state = shared_state_dir(os.path.join(layout.state_root, CID))
    elsewhere = tmp_path / "elsewhere"
    os.rename(state, elsewhere)
    os.symlink(elsewhere, state)
    with pytest.raises(ContainerNotUsable, match="is not a folder; refused"):
        container_run(layout, CID, "t")
    assert not (elsewhere / board.FILE_NAME).exists()


# Root enters any folder: as root, the call runs in a child without the two capabilities that let it (setpriv
# takes them out of the bounding set, so the child's exec cannot regain them), where 0000 means what it means
# for any user.
_UNPRIVILEGED_CALL = """
import sys
from fakegpu.faults.inject import ContainerLayout, ContainerNotUsable, container_run
try:
    container_run(ContainerLayout(*sys.argv[1:4]), sys.argv[4], "t")
except ContainerNotUsable as exc:
    print(exc)
    sys.exit(3)
"""


def test_a_state_root_the_user_cannot_enter_is_named(layout):
    import shutil
    import subprocess
    import sys

    os.chmod(layout.state_root, 0o000)
    try:
        if os.geteuid() != 0:
            with pytest.raises(ContainerNotUsable, match="permission denied"):
                container_run(layout, CID, "t")
            return
        assert shutil.which("setpriv"), "setpriv (util-linux) is needed to drop root's override"
        result = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all",
                                 sys.executable, "-c", _UNPRIVILEGED_CALL, layout.state_root,
                                 layout.state_name, layout.table_name, CID],
                                capture_output=True, text=True, timeout=60, env={**os.environ})
        assert result.returncode == 3, (result.stdout, result.stderr)
        assert "permission denied" in result.stdout
    finally:
        os.chmod(layout.state_root, 0o700)
