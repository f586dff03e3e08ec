"""How fast will it run: FakeGPU's performance models, usable without the CLI.

Today the roofline (`roofline.estimate`): an operation's FLOPs and bytes against a board's per-dtype peaks and
memory bandwidth from the catalog, with the efficiency each class of operation reaches in practice
(`efficiency.yaml`, every factor with its source). Operations come from `ops` (one op, or an op list file) or
from a model's config.json (`model_ops`).

Trace replay (`trace_replay.analyse`, `trace_whatif.what_if`): PyTorch profiler traces read as a stream
(`trace_read`), reduced per rank to arrays of GPU activities (`trace_collect`), classified (`trace_kernels`),
measured by HolisticTraceAnalysis's definitions (`trace_replay`, `trace_intervals`), and re-timed for another
board with the roofline's prices (`trace_whatif`, played again by `trace_retime`); collectives are priced through
one replaceable function (`trace_whatif.CollectivePricer`) that a topology model can take over.

Later rooms-within-the-room sit beside these modules: the topology and collectives model, the simulated timeline
writer; they price kernels through the same `roofline.estimate_op`.

Reports go through fakegpu.reports (`fakegpu.estimate-roofline/v1`, `fakegpu.replay-trace/v1`).
"""
