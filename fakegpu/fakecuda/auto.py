"""`import fakegpu.fakecuda.auto`: activate fakecuda now, devices from FAKEGPU_DEVICES (default one a100).

For interpreter-start activation (the fakegpu/pytorch image, `fakegpu run --mode fakecuda`), put
`import fakegpu.fakecuda.envhook` in a .pth file instead: it activates only when FAKEGPU_RUNTIME=fakecuda
and costs nothing (no torch import) otherwise.
"""

import fakegpu.fakecuda as _fc

if not _fc.is_active():
    _fc.activate()
