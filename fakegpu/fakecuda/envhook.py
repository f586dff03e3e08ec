"""Interpreter-start hook: activates fakecuda when FAKEGPU_RUNTIME=fakecuda, else does nothing (no torch import);
with FAKEGPU_TORCH_REPORT=1 (native-mode preflight) it installs the exit report of torch's own statistics.

A one-line .pth file (`import fakegpu.fakecuda.envhook`) in site-packages makes every Python process honour
FAKEGPU_RUNTIME / FAKEGPU_DEVICES, which is how the image and `fakegpu run --mode fakecuda` switch it on.
"""

import os

if os.environ.get("FAKEGPU_RUNTIME") == "fakecuda":
    import fakegpu.fakecuda as _fc

    if not _fc.is_active():
        _fc.activate()
elif os.environ.get("FAKEGPU_TORCH_REPORT") == "1":
    from fakegpu.fakecuda import nativehook as _nativehook

    _nativehook.install()
