"""`fakegpu runtime install --gpus`: our hook under the name `nvidia-container-runtime-hook`, so that dockerd
serves `docker run --gpus` and compose's `driver: nvidia` device reservations with FakeGPU's devices.

dockerd (daemon/nvidia_linux.go) looks that name up on its PATH once, at start, and registers its "nvidia"
device driver only if it is there; for each container that asks, it appends NVIDIA_VISIBLE_DEVICES (the device
IDs, `0,..,N-1` for a count, `all` for -1) and NVIDIA_DRIVER_CAPABILITIES (the NVIDIA ones among the requested
capabilities) to the process's environment and adds the file as a prestart hook, args
[nvidia-container-runtime-hook, prestart], env dockerd's own. The hook side is `hook.nvidia_main`.

The name is NVIDIA's: a host with NVIDIA's toolkit keeps it, and we refuse to install; uninstall removes a file
only when it is ours (front.NVIDIA_HOOK_MARK) and restores nothing else.
"""

from __future__ import annotations

import os

from fakegpu_hook.front import NVIDIA_HOOK, is_our_nvidia_hook, nvidia_hook_file, write_fronts

# Where dockerd finds executables when started by systemd (its default PATH) or by hand: the hook goes into
# the first of these by default, and any NVIDIA file in them means the toolkit is installed.
DOCKERD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_HOOK_DIR = "/usr/local/bin"
# nvidia-container-toolkit's (and libnvidia-container's) executables, and its configuration folder.
TOOLKIT_PROGRAMS = (NVIDIA_HOOK, "nvidia-container-toolkit", "nvidia-container-runtime", "nvidia-ctk",
                    "nvidia-container-cli", "nvidia-cdi-hook")
TOOLKIT_CONFIG_DIRS = ("/etc/nvidia-container-runtime", "/etc/nvidia-container-toolkit")
RESTART_NOTE = ("dockerd looks for nvidia-container-runtime-hook only when it starts: restart it "
                "(systemctl restart docker) for the change to take effect")


class GpusHookError(Exception):
    """Why the NVIDIA-named hook was not installed or removed; nothing was changed."""


def _search_dirs(hook_dir: str, path: str | None) -> list[str]:
    out: list[str] = []
    for d in [hook_dir, *(path if path is not None else os.environ.get("PATH", "")).split(os.pathsep),
              *DOCKERD_PATH.split(os.pathsep)]:
        if d and os.path.isabs(d) and d not in out:
            out.append(d)
    return out


def nvidia_toolkit_files(hook_dir: str, path: str | None = None) -> list[str]:
    """Files of NVIDIA's container toolkit on this host (in `hook_dir`, on PATH, on dockerd's default PATH,
    its config folders); our own front does not count."""
    found = []
    for d in _search_dirs(hook_dir, path):
        for name in TOOLKIT_PROGRAMS:
            candidate = os.path.join(d, name)
            if os.path.lexists(candidate) and not is_our_nvidia_hook(candidate):
                found.append(candidate)
    found += [d for d in TOOLKIT_CONFIG_DIRS if os.path.lexists(d)]
    return found


def install_gpus_hook(hook_dir: str = DEFAULT_HOOK_DIR, dry_run: bool = False, path: str | None = None,
                      python: str | None = None, pypath: list[str] | None = None) -> tuple[str, bool]:
    """(the hook's path, whether it was written or would be). Refuses, changing nothing, where NVIDIA's
    toolkit (or any file of that name not ours) is present: dockerd would find one or the other first."""
    if not os.path.isabs(hook_dir):
        raise GpusHookError(f"--hook-dir {hook_dir!r} must be an absolute path (dockerd's PATH holds those only)")
    found = nvidia_toolkit_files(hook_dir, path)
    if found:
        raise GpusHookError(f"NVIDIA's container toolkit is installed ({', '.join(found[:4])}"
                            f"{', ...' if len(found) > 4 else ''}): it serves `docker run --gpus` on this "
                            "host; FakeGPU does not replace it (use --runtime=fakegpu); nothing was written")
    files = nvidia_hook_file(hook_dir, python, pypath)
    target, text = next(iter(files.items()))
    try:
        with open(target, encoding="utf-8") as f:
            if f.read() == text and os.access(target, os.X_OK):
                return target, False
    except OSError:
        pass
    if not dry_run:
        try:
            write_fronts(files)
        except OSError as exc:
            raise GpusHookError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return target, True


def uninstall_gpus_hook(hook_dir: str = DEFAULT_HOOK_DIR, dry_run: bool = False) -> str | None:
    """Remove our NVIDIA-named front from `hook_dir`; the path removed (or that would be), None when there is
    none of ours there. A file of that name that is not ours is left alone."""
    target = os.path.join(hook_dir, NVIDIA_HOOK)
    if not is_our_nvidia_hook(target):
        return None
    if not dry_run:
        try:
            os.unlink(target)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise GpusHookError(f"cannot remove {target}: {exc.strerror or exc}") from exc
    return target
