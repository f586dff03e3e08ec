"""How fast will it run: FakeGPU's performance models, usable without the CLI.

Today the roofline (`roofline.estimate`): an operation's FLOPs and bytes against a board's per-dtype peaks and
memory bandwidth from the catalog, with the efficiency each class of operation reaches in practice
(`efficiency.yaml`, every factor with its source). Operations come from `ops` (one op, or an op list file) or
from a model's config.json (`model_ops`). Later rooms-within-the-room sit beside these modules: the topology
and collectives model, trace reading and replay, the simulated timeline writer; they price kernels through the
same `roofline.estimate_op`.

Reports go through fakegpu.reports (`fakegpu.estimate-roofline/v1`).
"""
