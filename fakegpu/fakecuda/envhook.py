"""Interpreter-start hook: activates fakecuda when FAKEGPU_RUNTIME=fakecuda, else does nothing (no torch import);
with FAKEGPU_TORCH_REPORT=1 (native-mode preflight) it installs the exit report of torch's own statistics; in
torchrun's agent with FAKEGPU_SHARE_TORCH=1 it routes the worker launches through a zygote (zygote.py).

A one-line .pth file (`import fakegpu.fakecuda.envhook`) in site-packages makes every Python process honour
FAKEGPU_RUNTIME / FAKEGPU_DEVICES, which is how the image and `fakegpu run --mode fakecuda` switch it on.
"""

import os


def start(environ) -> None:  # os.environ or a dict (typing is not imported at interpreter start)
    """What the hook does for a process with this environment; zygote workers call it after their fork."""
    if environ.get("FAKEGPU_RUNTIME") == "fakecuda":
        import fakegpu.fakecuda as fc

        if not fc.is_active():
            fc.activate()
    elif environ.get("FAKEGPU_TORCH_REPORT") == "1":
        from fakegpu.fakecuda import nativehook

        nativehook.install()
    if environ.get("FAKEGPU_SHARE_TORCH") == "1":
        from fakegpu.fakecuda import zygote

        if zygote.is_torchrun_agent():
            zygote.install()


start(os.environ)
