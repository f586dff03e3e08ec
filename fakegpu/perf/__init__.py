"""How fast will it run: FakeGPU's performance models, usable without the CLI.

Today the roofline (`roofline.estimate`): an operation's FLOPs and bytes against a board's per-dtype peaks and
memory bandwidth from the catalog, with the efficiency each class of operation reaches in practice
(`efficiency.yaml`, every factor with its source). Operations come from `ops` (one op, or an op list file) or
from a model's config.json (`model_ops`).

The topology model (`simulate.simulate`): a cluster's fabric as directed links with capacities and latencies
(`topology`, from a file: `fabric_file`, from either a file or the generator's options: `fabric_options`; the data
of fabrics, shares and latencies: `fabric_kinds` and `fabrics.yaml`), collectives as the loads their algorithms
put on those links (`collectives`), and a training step's communication (`training_comm`).

Trace replay (`trace_replay.analyse`, `trace_whatif.what_if`): PyTorch profiler traces read as a stream
(`trace_read`), reduced per rank to arrays of GPU activities (`trace_collect`), classified (`trace_kernels`),
measured by HolisticTraceAnalysis's definitions (`trace_replay`, `trace_window`, `trace_intervals`,
`trace_collectives`), and re-timed for another board with the roofline's prices (`trace_whatif`, played again by
`trace_retime`); collectives are priced through one replaceable function (`trace_links.CollectivePricer`): with a
fabric the topology model's ratio of target to source (`trace_fabric`), without one the boards' link bandwidth
ratio (`trace_links`).

The simulated timeline (`fakegpu run --timeline`): native mode's per-process log of GPU work (`timeline_log`),
priced per piece (`timeline_price`: GEMMs through the same `roofline.estimate_op`, collectives through
`collectives`), played with CUDA's stream and synchronisation order (`timeline`) and written as a Kineto trace
with its summary (`timeline_kineto`, one per process: `timeline_run`).

Measured beside modeled (`bandwidth`): a collective sweep run through torch.distributed on this host or a
cluster (`bandwidth_launch`; the ranks run `bandwidth_worker`, torch only), each row next to `simulate`'s figures
for the target fabric.

Reports go through fakegpu.reports (`fakegpu.estimate-roofline/v1`, `fakegpu.simulate-topology/v1`,
`fakegpu.replay-trace/v1`, `fakegpu.bandwidth/v1`).
"""
