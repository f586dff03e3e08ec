"""The `fakegpu demo` workload: a few optimizer steps of a small model on fake `cuda`, unchanged PyTorch code."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class DemoResult:
    devices: list[dict]
    losses: list[float]
    memory: list[dict] = field(default_factory=list)
    torch_version: str = ""
    mode: str = "fakecuda"

    def to_dict(self) -> dict:
        return asdict(self)


def run_demo(devices: str, steps: int = 3) -> DemoResult:
    import torch
    from torch import nn

    import fakegpu.fakecuda as fc

    runtime = fc.activate(devices)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10)).to("cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(128, 64, device="cuda")
        y = torch.randint(0, 10, (128,), device="cuda")
        losses = []
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(round(loss.item(), 6))
        torch.cuda.synchronize()
        names = [
            {"index": d.index, "name": torch.cuda.get_device_name(d.index), "uuid": d.device.uuid,
             "compute_capability": ".".join(map(str, torch.cuda.get_device_capability(d.index))),
             "total_memory_bytes": torch.cuda.get_device_properties(d.index).total_memory}
            for d in runtime.devices
        ]
        return DemoResult(names, losses, runtime.summary(), torch.__version__)
    finally:
        fc.deactivate()
