"""The installed entry points: small POSIX sh fronts that `fakegpu runtime install` writes and registers.

Docker calls its runtime 4-6 times per container (create, start, state, kill, delete). A Python entry point
pays interpreter start-up (and the editable install's import hook) on every one of them; the runtime front
finds runc's subcommand in sh and execs the low-level runtime directly for everything but `create`, removes
the per-container state folder itself on `delete`, and hands `create` to the C binary `fakegpu-create`
(native/container: the common case with no Python at all; it execs Python for anything else). Python starts
directly only when that binary is not built, and for a configuration the front cannot read in sh. Python is
started isolated (`-I -S`: no site, no .pth files, no PYTHON* variables) with the package folders put on
sys.path, which also makes the hook front cheap.

The rules the front applies (runc's options that take a value, the settings it reads in sh, their variables and
defaults) are rendered into it from fakegpu_hook.contract; the subcommand walk itself is sh here and Python in
`runtime.find_command`, and tests run both on the same argument lists.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys

from fakegpu.atomic_file import write_atomic
from fakegpu_hook.contract import CONFIG_VARIABLE, DEFAULT_CONFIG, RUNC_OPTIONS_WITH_VALUE, SETTINGS

RUNTIME_FRONT = "fakegpu-container-runtime"
HOOK_FRONT = "fakegpu-hook"
CREATE_BINARY = "fakegpu-create"
# dockerd serves `--gpus` (and compose's `driver: nvidia` reservations) only when an executable of this name is on
# its PATH at start; it then adds it as a prestart hook with the arguments [NVIDIA_HOOK, "prestart"].
NVIDIA_HOOK = "nvidia-container-runtime-hook"
# The line that tells our NVIDIA-named front from NVIDIA's binary (or anyone else's file): uninstall removes,
# and install overwrites, only a file that carries it.
NVIDIA_HOOK_MARK = "# fakegpu: nvidia-container-runtime-hook front, written by `fakegpu runtime install --gpus`"

_RUNTIME_TEMPLATE = r"""#!/bin/sh
# fakegpu-container-runtime front, written by `fakegpu runtime install`: rerun that rather than editing this.
# Every command but create and delete execs the low-level runtime at once. create goes to the C fast path
# (native/container, built by `make`), which hands anything it does not handle to Python; Python when unbuilt.
PYTHON=@PYTHON@
PYCODE=@PYCODE@
CREATE=@CREATE@

py() { exec "$PYTHON" -I -S -c "$PYCODE" "$@"; }

# A config file that sets low_level_runtime or state_root: read a plain string value in sh, else Python.
conf_value() {
    _v=$(sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\([^\"\\\\]*\)\".*/\1/p" "$conf" 2>/dev/null) || return 1
    [ -n "$_v" ] || return 1
    printf '%s\n' "$_v"
}

cmd=
skip=
take=
for a in "$@"; do
    if [ -n "$take" ]; then cmd=$a; break; fi
    if [ -n "$skip" ]; then skip=; continue; fi
    case $a in
        --) take=1 ;;
        @OPTIONS@) skip=1 ;;
        -*) ;;
        *) cmd=$a; break ;;
    esac
done

low=${@LOW_VAR@:-}
root=${@ROOT_VAR@:-}
conf=${@CONFIG_VAR@:-@CONFIG@}
if [ -e "$conf" ]; then
    mentions=
    while IFS= read -r line || [ -n "$line" ]; do
        case $line in
            *@LOW_KEY@*) mentions="$mentions low" ;;
        esac
        case $line in
            *@ROOT_KEY@*) mentions="$mentions root" ;;
        esac
    done < "$conf"
    case $mentions in
        *low*) [ -n "$low" ] || low=$(conf_value @LOW_KEY@) || py "$@" ;;
    esac
    case $mentions in
        *root*) [ -n "$root" ] || root=$(conf_value @ROOT_KEY@) || py "$@" ;;
    esac
fi
low=${low:-@LOW_DEFAULT@}
root=${root:-@ROOT_DEFAULT@}

case $cmd in
    create)
        if [ -x "$CREATE" ]; then
            exec "$CREATE" --python "$PYTHON" --pycode "$PYCODE" --native-default @NATIVE@ --catalog @CATALOG@ -- "$@"
        fi
        py "$@" ;;
    delete)
        for id in "$@"; do :; done
        case $id in
            ''|-*|*/*|.|..) ;;
            *) if [ -d "$root/$id" ]; then rm -rf -- "${root:?}/$id"; fi ;;
        esac
        ;;
esac
exec "$low" "$@"
"""

_HOOK_TEMPLATE = r"""#!/bin/sh
# fakegpu-hook front, written by `fakegpu runtime install`: rerun that rather than editing this.
exec @PYTHON@ -I -S -c @PYCODE@ "$@"
"""


_NVIDIA_HOOK_TEMPLATE = r"""#!/bin/sh
@MARK@
# Not NVIDIA's hook: dockerd runs it for `docker run --gpus` as `nvidia-container-runtime-hook prestart`, and it
# injects FakeGPU's devices (fakegpu_hook.hook.nvidia_main). `fakegpu runtime uninstall` removes it.
exec @PYTHON@ -I -S -c @PYCODE@ "$@"
"""


def _pycode(module: str, self_path: str, pypath: list[str], function: str = "main") -> str:
    # JSON strings are Python literals too, and their double quotes sit well inside sh's single quotes.
    return (f"import sys; sys.path[:0] = {json.dumps(pypath)}; sys.argv[0] = {json.dumps(self_path)}; "
            f"from {module} import {function}; sys.exit({function}())")


def package_path() -> list[str]:
    """The folders that hold the packages `fakegpu` and `fakegpu_hook` (one folder for a wheel install, two for
    an editable install of the checkout), for an interpreter started without site."""
    import fakegpu
    import fakegpu_hook

    out: list[str] = []
    for pkg in (fakegpu_hook, fakegpu):
        folder = os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__)))
        if folder not in out:
            out.append(folder)
    return out


class CreatePaths:
    """What the C `create` (native/container) needs that only the Python side knows: where the binary is, the
    default native build folder (`settings.native_lib_dir` when unset) and the compiled catalog table, which it
    both resolves specs with and mounts, as the Python runtime does."""

    __slots__ = ("binary", "catalog", "native_default")

    def __init__(self, binary: str, native_default: str, catalog: str) -> None:
        self.binary, self.native_default, self.catalog = binary, native_default, catalog

    @classmethod
    def of_checkout(cls) -> CreatePaths:
        from fakegpu import locations

        return cls(os.path.join(locations.NATIVE_BIN_DIR, CREATE_BINARY), locations.NATIVE_LIB_DIR,
                   locations.COMPILED_CATALOG_TABLE)


# Empty: no C fast path, every create goes to Python.
NO_CREATE = CreatePaths("", "", "")


def render_runtime_front(python: str, self_path: str, pypath: list[str], create: CreatePaths = NO_CREATE) -> str:
    options = "|".join(f"-{o}|--{o}" for o in RUNC_OPTIONS_WITH_VALUE)
    (low_var, low_default), (root_var, root_default) = SETTINGS["low_level_runtime"], SETTINGS["state_root"]
    text = _RUNTIME_TEMPLATE
    # The contract's names and defaults are plain words and paths, written in as they are.
    for mark, value in (("@LOW_VAR@", low_var), ("@ROOT_VAR@", root_var), ("@CONFIG_VAR@", CONFIG_VARIABLE),
                        ("@CONFIG@", DEFAULT_CONFIG), ("@LOW_KEY@", "low_level_runtime"),
                        ("@ROOT_KEY@", "state_root"), ("@LOW_DEFAULT@", low_default),
                        ("@ROOT_DEFAULT@", root_default)):
        text = text.replace(mark, value)
    return (text.replace("@PYTHON@", shlex.quote(python))
            .replace("@PYCODE@", shlex.quote(_pycode("fakegpu_hook.runtime", self_path, pypath)))
            .replace("@OPTIONS@", options)
            .replace("@CREATE@", shlex.quote(create.binary))
            .replace("@NATIVE@", shlex.quote(create.native_default))
            .replace("@CATALOG@", shlex.quote(create.catalog)))


def render_hook_front(python: str, self_path: str, pypath: list[str]) -> str:
    return (_HOOK_TEMPLATE.replace("@PYTHON@", shlex.quote(python))
            .replace("@PYCODE@", shlex.quote(_pycode("fakegpu_hook.hook", self_path, pypath))))


def render_nvidia_hook_front(python: str, self_path: str, pypath: list[str]) -> str:
    return (_NVIDIA_HOOK_TEMPLATE.replace("@MARK@", NVIDIA_HOOK_MARK)
            .replace("@PYTHON@", shlex.quote(python))
            .replace("@PYCODE@", shlex.quote(_pycode("fakegpu_hook.hook", self_path, pypath, "nvidia_main"))))


def nvidia_hook_file(directory: str, python: str | None = None, pypath: list[str] | None = None) -> dict[str, str]:
    """{path: content} of the NVIDIA-named front in `directory`."""
    path = os.path.join(directory, NVIDIA_HOOK)
    return {path: render_nvidia_hook_front(python or sys.executable, path,
                                           pypath if pypath is not None else package_path())}


def is_our_nvidia_hook(path: str) -> bool:
    """A regular file (not a link: its target is not ours to judge) whose second line is our mark."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except OSError:
        return False
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return False
        head = f.read(4096).split(b"\n")
    return len(head) > 1 and head[1] == NVIDIA_HOOK_MARK.encode()


def default_front_dir() -> str:
    """`<prefix>/libexec/fakegpu`: the virtual environment's (or /usr/local's) own, beside nothing of Docker's."""
    return os.path.join(sys.prefix, "libexec", "fakegpu")


def front_files(directory: str, python: str | None = None, pypath: list[str] | None = None,
                create: CreatePaths | None = None) -> dict[str, str]:
    """{path: content} of both fronts for `directory`. `create` defaults to this checkout's C binary, used
    whenever it is built (the front checks at each call, so a later `make` needs no reinstall)."""
    python = python or sys.executable
    pypath = pypath if pypath is not None else package_path()
    create = create if create is not None else CreatePaths.of_checkout()
    runtime = os.path.join(directory, RUNTIME_FRONT)
    hook = os.path.join(directory, HOOK_FRONT)
    return {runtime: render_runtime_front(python, runtime, pypath, create),
            hook: render_hook_front(python, hook, pypath)}


def write_fronts(files: dict[str, str]) -> list[str]:
    """Write each front whose content differs (atomically, mode 0755); the paths written."""
    written = []
    for path, text in files.items():
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text and os.access(path, os.X_OK):
                    continue
        except OSError:
            pass
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        write_atomic(path, text, mode=0o755)
        written.append(path)
    return written


def remove_fronts(directory: str) -> list[str]:
    removed = []
    for name in (RUNTIME_FRONT, HOOK_FRONT):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            os.unlink(path)
            removed.append(path)
    try:
        os.rmdir(directory)
    except OSError:
        pass
    return removed
