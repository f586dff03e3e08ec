"""Fit the reserved-over-allocated terms of fakegpu/estimate/reserved.py to native-mode allocator records.

Per workload (one run of workload.py) the quantities are the ones the estimators have:
  resident  training: bytes of parameters and optimizer states (allocated, as plan-training's components);
            inference: the weights' reserved segments as runtime.reserved_for_resident replays them
  transient the run's peak allocated bytes minus the allocated resident bytes
  states    optimizer-state bytes (0 for inference)
and the target is the run's max_memory_reserved. Peaks count from what the process held when the workload
began (workload.py's reserved_at_start / allocated_at_start: what an earlier workload left that empty_cache
cannot free). For each kind of step (reserved.KINDS) the terms a, c, b of
    reserved = resident + a * transient + c * states + b
are found by least squares on the relative error of the whole reserved figure (what a user compares with), so a
10 MiB miss on a 100 MiB run weighs as much as a 1 GiB miss on a 10 GiB run. Training fits a and c with b = 0:
a constant fitted on models of at most 1B parameters would be carried unchanged to 70B ones, while a and c scale
with what they multiply; c is kept only if it comes out positive (states cannot free memory). Inference fits a and
b (no optimizer; b is the small pool's segments and the like, a few MiB). Training whose batches vary in length
keeps the fixed-length terms and adds v * the loss's buffers (logits, fp32 upcast, log-softmax, as
training_recipes.logits_bytes counts them), the tensors whose segments, cut for each step's length, stay reserved;
v is fitted on what the fixed terms leave.
Residuals per workload are kept in the fit file.
"""

from __future__ import annotations

import statistics

from fakegpu.estimate import runtime
from fakegpu.estimate.reserved import KINDS, SCHEMA, Terms
from fakegpu.estimate.training_recipes import logits_bytes

MIB = 1 << 20


def kind_of(spec: dict) -> str:
    if spec["kind"] == "inference":
        return "inference"
    return "training_varying" if spec.get("lengths") == "varying" else "training"


def _first_at(run: dict, key: str) -> str:
    """The phase (and step) in which the run's maximum of `key` was first reached."""
    top = max(p[key] for p in run["phases"])
    p = next(p for p in run["phases"] if p[key] == top)
    return p["phase"] + (f"{p['step']}" if "step" in p else "")


def row(run: dict, expandable: bool) -> dict:
    """The estimator-side quantities of one recorded run."""
    spec = run["spec"]
    params = run["trainable_param_sizes"] + run["frozen_param_sizes"]
    states = run["optimizer_state_sizes"]
    allocated = sum(runtime.round_alloc(n) for n in params + states)
    load = next(p for p in run["phases"] if p["phase"] == "load")
    base_reserved, base_allocated = run["reserved_at_start"], run.get("allocated_at_start", 0)
    peak_allocated = run["run_peak_allocated"] - base_allocated
    peak_reserved = run["run_peak_reserved"] - base_reserved
    modeled = runtime.reserved_for_resident(params, expandable=expandable)
    resident = modeled if spec["kind"] == "inference" else allocated
    # The loss's buffers as plan-training counts them (bf16 logits, also under autocast, and the fp32 ones).
    loss = 0 if spec["kind"] == "inference" else logits_bytes(spec["batch"] * spec["seq"], spec["model"]["vocab"], 2,
                                                                "full")
    return {"name": spec["name"], "kind": kind_of(spec), "checkpointed": bool(spec.get("grad_checkpointing")),
            "resident_bytes": resident,
            "resident_allocated_bytes": allocated, "transient_bytes": peak_allocated - allocated,
            "optimizer_state_bytes": sum(runtime.round_alloc(n) for n in states), "loss_buffer_bytes": loss,
            "max_memory_allocated": peak_allocated, "max_memory_reserved": peak_reserved,
            "load_reserved_measured": load["reserved"] - base_reserved,
            "load_reserved_modeled": modeled,
            "peak_phases": {"allocated": _first_at(run, "peak_allocated"), "reserved": _first_at(run, "peak_reserved")},
            "segments": {"small": max(p["small_segments"] for p in run["phases"]),
                         "large": max(p["large_segments"] for p in run["phases"])}}


def _solve(m: list[list[float]], v: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the normal equations are at most 3 x 3)."""
    n = len(v)
    a = [[*r, v[i]] for i, r in enumerate(m)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[piv] = a[piv], a[col]
        if abs(a[col][col]) < 1e-30:
            raise ValueError("the workloads do not determine the terms (singular normal equations)")
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def fit_terms(rows: list[dict], names: tuple[str, ...]) -> Terms:
    """Weighted least squares of reserved - resident on the terms `names`, weight 1 / reserved."""
    xs, ys = [], []
    for r in rows:
        w = 1.0 / r["max_memory_reserved"]
        feats = {"a": r["transient_bytes"], "c": r["optimizer_state_bytes"], "b": 1.0}
        xs.append([feats[k] * w for k in names])
        ys.append((r["max_memory_reserved"] - r["resident_bytes"]) * w)
    if len(rows) < len(names):
        # Too few runs to fit (the quick path's one run per kind): the plain ratio, no constant.
        r = rows[0]
        return Terms((r["max_memory_reserved"] - r["resident_bytes"]) / max(r["transient_bytes"], 1), 0.0, 0.0)
    k = len(names)
    normal = [[sum(x[i] * x[j] for x in xs) for j in range(k)] for i in range(k)]
    rhs = [sum(x[i] * y for x, y in zip(xs, ys, strict=True)) for i in range(k)]
    got = dict(zip(names, _solve(normal, rhs), strict=True))
    return Terms(got["a"], got.get("c", 0.0), got.get("b", 0.0))


def fit_varying(rows: list[dict], fixed: Terms) -> Terms:
    """Batches of varying length: the fixed-length step's terms plus v * the loss's buffers, v by weighted least
    squares on what the fixed terms leave (weight 1 / reserved, as fit_terms)."""
    num = den = 0.0
    for r in rows:
        rest = r["max_memory_reserved"] - r["resident_bytes"] - fixed.held(r["transient_bytes"],
                                                                           r["optimizer_state_bytes"])
        w2 = 1.0 / r["max_memory_reserved"] ** 2
        num += r["loss_buffer_bytes"] * rest * w2
        den += r["loss_buffer_bytes"] ** 2 * w2
    return Terms(fixed.a, fixed.c, fixed.b, max(0.0, num / den) if den else 0.0)


def predict(r: dict, terms: Terms) -> int:
    """What the estimators compute for this run: resident plus the held transient, in 2 MiB segments."""
    held = terms.held(r["transient_bytes"], r["optimizer_state_bytes"], r.get("loss_buffer_bytes", 0))
    return runtime.round_up(r["resident_bytes"] + held, runtime.LARGE_ROUND)


def _score(errors: list[float]) -> dict:
    return {"runs": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors),
            "worst_underestimate": min(0.0, *errors), "worst_overestimate": max(0.0, *errors)}


def fit_conf(doc: dict) -> dict:
    rows = [row(run, "expandable_segments:true" in doc["alloc_conf"].lower()) for run in doc["runs"]]
    terms, scores = {}, {}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            raise ValueError(f"no {kind} workload was measured under {doc['alloc_conf']}")
        if kind == "inference":
            t = fit_terms(mine, ("a", "b"))
        elif kind == "training_varying":
            t = fit_varying(mine, Terms(**terms["training"]))
        else:
            t = fit_terms(mine, ("a", "c"))
            if t.c < 0:
                t = fit_terms(mine, ("a",))
        terms[kind] = {"a": round(t.a, 4), "c": round(t.c, 4), "b": round(t.b), "v": round(t.v, 4)}
        rounded = Terms(**terms[kind])
        errs = []
        for r in mine:
            r["predicted_reserved"] = predict(r, rounded)
            r["error"] = round((r["predicted_reserved"] - r["max_memory_reserved"]) / r["max_memory_reserved"], 4)
            errs.append(r["error"])
        scores[kind] = _score(errs)
        if kind.startswith("training"):  # the estimator adds checkpointing's own term on top; see reserved.KINDS
            for label, ckpt in (("checkpointed_runs", True), ("plain_runs", False)):
                group = [r["error"] for r in mine if r["checkpointed"] == ckpt]
                if group:  # the quick path measures one run of some kinds
                    scores[f"{kind}_{label}"] = _score(group)
    load = [(r["load_reserved_modeled"] - r["load_reserved_measured"]) / r["load_reserved_measured"] for r in rows]
    return {"alloc_conf": doc["alloc_conf"], "terms": terms, "scores": scores,
            "load_phase_worst_error": max(load, key=abs), "workloads": rows}


def fit_all(measured: dict[str, dict]) -> dict:
    """The fit file's document from the records of each allocator configuration."""
    first = next(iter(measured.values()))
    return {"schema": SCHEMA, "tool": "tools/reserved_fit/run.py", "torch": first["torch"], "cuda": first["cuda"],
            "device": first["device"],
            "model": "reserved = resident + max(transient, a*transient + c*optimizer_states + b) + v*loss_buffers, "
                     "in 2 MiB",
            "alloc_confs": {name: fit_conf(doc) for name, doc in measured.items()},
            "specs": [run["spec"] for run in first["runs"]]}


def describe(doc: dict) -> str:
    lines = [f"reserved-memory fit (torch {doc['torch']}, {doc['device']}): {doc['model']}"]
    for name, conf in doc["alloc_confs"].items():
        lines.append(f"  {name} ({conf['alloc_conf']}); load phase, weights replayed vs measured: worst "
                     f"{conf['load_phase_worst_error'] * 100:+.2f}%")
        for kind, t in conf["terms"].items():
            lines.append(f"    {kind:16s} a={t['a']:.4f} c={t['c']:.4f} b={t['b'] / MIB:+6.1f} MiB v={t['v']:.4f}")
        for label, s in conf["scores"].items():
            lines.append(f"      {label:28s} {s['runs']:3d} runs: median |err| {s['median_abs_error'] * 100:5.2f}%, "
                         f"range {s['worst_underestimate'] * 100:+6.2f}% .. {s['worst_overestimate'] * 100:+6.2f}%")
    return "\n".join(lines)
