"""Telemetry replay: a run's utilization, power, temperature and SM clock played from a recording instead of the
load model (native/nvml/model.c), so monitoring, alerting and autoscaling can be rehearsed on a known curve, or on
one captured from a real GPU.

The recording is long-form samples (time, device, metric, value), as CSV with that header or as JSON (a list of
objects with those keys, or {"samples": [...]}). `time` is seconds from the run's start (or 90s, 1.5m); `device` a
GPU index of the run or its UUID; `metric` an nvidia-smi query name (utilization.gpu, utilization.memory,
power.draw, temperature.gpu, clocks.sm) or dcgm-exporter's name for it (DCGM_FI_DEV_GPU_UTIL, ...). A metric holds
each sample's value until its next sample, and its last one to the end of the run; before its first sample, and
for metrics a recording does not name, the model answers. Device memory is not replayed: it is what the run's
processes allocate.

It is checked and compiled here into `telemetry.replay` in the run's state folder, which NVML reads (every reader
agrees, as with the fault board). Layout (native byte order):

    0   magic     8 bytes  MAGIC
    8   count     u32      samples
    12  (zero)    u32
    16  start_ns  u64      CLOCK_REALTIME of the run's start: sample times count from it
    24  sample[count], SAMPLE_SIZE bytes each, sorted by (device, metric, time):
        0   t_ms    u32  ms after start_ns
        4   device  u16  index in the run's device table
        6   metric  u16  METRIC_* below
        8   value   f64  in the metric's unit (% , W, C, MHz)

Standard library only: tools/gen_contract.py reads these constants into NVML's header.
"""

from __future__ import annotations

import csv
import io
import json
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fakegpu.errors import UsageError, shorten

MAGIC = b"FGREPLY1"
FILE_NAME = "telemetry.replay"
HEADER = struct.Struct("=8sIIQ")
SAMPLE = struct.Struct("=IHHd")
SAMPLE_SIZE = SAMPLE.size
MAX_SAMPLES = 4_000_000  # 64 MB of samples: hours of a busy cluster at one sample a second per metric
MAX_FILE_BYTES = 512 << 20  # far more text than MAX_SAMPLES take; a larger file is refused before it is read
MAX_T_MS = (1 << 32) - 1

METRIC_GPU_UTIL = 1
METRIC_MEM_UTIL = 2
METRIC_POWER_W = 3
METRIC_TEMPERATURE_C = 4
METRIC_SM_CLOCK_MHZ = 5

# name -> (id, lowest, highest, unit)
METRICS: dict[str, tuple[int, float, float, str]] = {
    "utilization.gpu": (METRIC_GPU_UTIL, 0, 100, "%"),
    "utilization.memory": (METRIC_MEM_UTIL, 0, 100, "%"),
    "power.draw": (METRIC_POWER_W, 0, 5000, "W"),
    "temperature.gpu": (METRIC_TEMPERATURE_C, 0, 150, "C"),
    "clocks.sm": (METRIC_SM_CLOCK_MHZ, 0, 10000, "MHz"),
}
ALIASES = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization.gpu",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "utilization.memory",
    "DCGM_FI_DEV_POWER_USAGE": "power.draw",
    "DCGM_FI_DEV_GPU_TEMP": "temperature.gpu",
    "DCGM_FI_DEV_SM_CLOCK": "clocks.sm",
}
COLUMNS = ("time", "device", "metric", "value")


class InvalidReplay(UsageError):
    """A telemetry recording that does not parse or names what the run does not have."""

    code = "invalid_telemetry_replay"


@dataclass(frozen=True, order=True)
class Sample:
    device: int
    metric: int
    t_ms: int
    value: float


def _metric(name: str, where: str) -> tuple[int, float, float, str]:
    from fakegpu.profiles.matching import closest, suggestion_hint

    canonical = ALIASES.get(name.strip(), name.strip())
    if canonical in METRICS:
        return METRICS[canonical]
    # a close spelling, else the metric the name is part of (power: power.draw)
    near = closest(name, [*METRICS, *ALIASES], 1) or [m for m in METRICS if name.strip().lower() in m][:1]
    raise InvalidReplay(f"{where}: metric {shorten(name)} is not replayed"
                        + suggestion_hint(near, quote=False)
                        + f"; accepted: {', '.join(METRICS)} or dcgm-exporter's {', '.join(ALIASES)}")


def _device(value: object, uuids: Sequence[str], where: str) -> int:
    text = str(value).strip()
    if text.isdigit():
        if int(text) >= len(uuids):
            raise InvalidReplay(f"{where}: GPU {text}: the run has GPUs 0..{len(uuids) - 1}")
        return int(text)
    for i, u in enumerate(uuids):
        if u.lower() == text.lower():
            return i
    raise InvalidReplay(f"{where}: device {shorten(text)} is not a GPU of the run; expected its index "
                        f"(0..{len(uuids) - 1}) or UUID")


def _sample(row: dict[str, object], uuids: Sequence[str], where: str) -> Sample:
    from fakegpu.durations import seconds

    missing = [c for c in COLUMNS if row.get(c) in (None, "")]
    if missing:
        raise InvalidReplay(f"{where}: no {', '.join(missing)}; each sample has {', '.join(COLUMNS)}")
    t = seconds(row["time"] if isinstance(row["time"], (int, float)) else str(row["time"]))
    if t is None or t * 1000 > MAX_T_MS:
        raise InvalidReplay(f"{where}: time {shorten(str(row['time']))} is not a duration from the run's start "
                            "(seconds, or 90s, 1.5m, 2h; at most 49 days)")
    metric, low, high, unit = _metric(str(row["metric"]), where)
    try:
        value = float(row["value"])  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidReplay(f"{where}: value {shorten(str(row['value']))} is not a number") from None
    if not low <= value <= high:
        raise InvalidReplay(f"{where}: {row['metric']} {value:g} {unit} is outside {low:g}..{high:g} {unit}")
    return Sample(_device(row["device"], uuids, where), metric, round(t * 1000), value)


def parse(text: str, source: str, uuids: Sequence[str]) -> list[Sample]:
    """The samples of a recording (CSV with a header, or JSON), sorted by device, metric and time."""
    stripped = text.lstrip()
    rows: Iterable[tuple[str, dict[str, object]]]
    if stripped.startswith(("[", "{")):
        from fakegpu.user_files import loads_json

        try:
            doc = loads_json(text)
        except json.JSONDecodeError as exc:
            raise InvalidReplay(f"{source}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from exc
        items = doc.get("samples") if isinstance(doc, dict) else doc
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise InvalidReplay(f"{source}: expected a list of samples, each {{{', '.join(COLUMNS)}}}, or "
                                "{\"samples\": [...]}")
        rows = ((f"{source}: samples[{i}]", item) for i, item in enumerate(items))
    else:
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in reader.fieldnames or []]
        if header[:4] != list(COLUMNS):
            raise InvalidReplay(f"{source}: the first line is {shorten(','.join(header)) or 'empty'}; a recording's "
                                f"CSV header is {','.join(COLUMNS)} (or give JSON)")
        reader.fieldnames = header
        rows = ((f"{source}:{reader.line_num}", row) for row in reader)
    samples = []
    for where, row in rows:
        samples.append(_sample(row, uuids, where))
        if len(samples) > MAX_SAMPLES:
            raise InvalidReplay(f"{source}: more than {MAX_SAMPLES} samples; resample it coarser")
    if not samples:
        raise InvalidReplay(f"{source}: no samples")
    return sorted(samples)


def load(path: str | os.PathLike[str], uuids: Sequence[str]) -> list[Sample]:
    from fakegpu.user_files import UnreadableFile, read_text

    try:
        text = read_text(path, MAX_FILE_BYTES)
    except UnreadableFile as exc:
        raise InvalidReplay(f"telemetry replay {shorten(str(path))}: {exc}"
                            + ("; a recording is at most that: resample it coarser" if "more than" in str(exc)
                               else "")) from exc
    return parse(text, str(path), uuids)


def write(state_dir: str | os.PathLike[str], samples: Sequence[Sample], start_ns: int) -> Path:
    """The compiled recording in the run's state folder, complete before its name appears (readers map it)."""
    out = Path(state_dir) / FILE_NAME
    tmp = out.with_name(f"{FILE_NAME}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(HEADER.pack(MAGIC, len(samples), 0, start_ns))
        f.write(b"".join(SAMPLE.pack(s.t_ms, s.device, s.metric, s.value) for s in samples))
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    return out


def read(path: str | os.PathLike[str]) -> tuple[int, list[Sample]]:
    """(start_ns, samples) of a compiled recording."""
    raw = Path(path).read_bytes()
    magic, count, _, start = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise InvalidReplay(f"{path} is not a compiled telemetry recording")
    return start, [Sample(d, m, t, v) for t, d, m, v in
                   (SAMPLE.unpack_from(raw, HEADER.size + i * SAMPLE_SIZE) for i in range(count))]
