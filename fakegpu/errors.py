"""The error tree of FakeGPU: one root, subclasses that carry what a user needs to fix the input."""

from __future__ import annotations

from collections.abc import Sequence

# Named exit codes, so scripts can tell bad input from a failed check or an internal fault.
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CHECK_FAILED = 3
# `fakegpu run`: the program read kernel-written device memory under --on-device-read error (native/cuda/driver/
# written.c exits with it: FGD_EXIT_DEVICE_READ), and the run outlived --timeout (as coreutils' timeout).
EXIT_DEVICE_READ = 86
EXIT_TIMEOUT = 124
# As a shell reports a command ended by SIGINT (128 + 2): a run the user or a supervisor stopped.
EXIT_INTERRUPTED = 130


SHOWN_CHARACTERS = 80


def shorten(value: str, keep: int = SHOWN_CHARACTERS) -> str:
    """repr(value), cut to its first `keep` characters with the full length named: a hostile 1 MB value is never
    echoed back into a message, a log or a terminal."""
    if len(value) <= keep:
        return repr(value)
    return f"{value[:keep]!r}... ({len(value)} characters)"


def clip(text: str, keep: int = 3 * SHOWN_CHARACTERS) -> str:
    """A message of someone else's (a schema validator's, which quotes the whole offending value) cut to its first
    `keep` characters, so a hostile value never floods the terminal through it."""
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


class FakeGPUError(Exception):
    """Root of every error FakeGPU raises on purpose; the CLI catches it once and exits with `exit_code`."""

    exit_code = EXIT_FAILURE
    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CatalogError(FakeGPUError):
    """The GPU catalog (profiles/ or its compiled form) is missing or breaks the schema or an invariant."""

    code = "catalog-invalid"

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        detail = "".join(f"\n  - {p}" for p in problems)
        super().__init__(message + detail)
        self.problems = list(problems)


class UnknownProfile(FakeGPUError):
    """A name that is no profile id, alias or board name."""

    exit_code = EXIT_USAGE
    code = "unknown-profile"

    def __init__(self, name: str, suggestions: Sequence[str]) -> None:
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(
            f"unknown GPU profile {name!r}.{hint} (`fakegpu profiles list` shows every profile)"
        )
        self.name = name
        self.suggestions = list(suggestions)


class InvalidDeviceSpec(FakeGPUError):
    """A FAKEGPU_DEVICES value that does not parse; names the bad part and what is accepted."""

    exit_code = EXIT_USAGE
    code = "invalid-device-spec"
    accepted = "PROFILE[:COUNT][:mig=LAYOUT][,...], e.g. 'a100:4', 'a100:2,h100', 'a100:mig=4g.40gb+3g.40gb'"

    def __init__(self, spec: str, part: str, reason: str, suggestions: Sequence[str] = ()) -> None:
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(
            f"invalid device spec {shorten(spec)}: part {shorten(part)}: {reason}.{hint} Accepted: {self.accepted}"
        )
        self.spec = spec
        self.part = part
        self.reason = reason
        self.suggestions = list(suggestions)


class InvalidDeviceSelection(FakeGPUError):
    """An NVIDIA_VISIBLE_DEVICES entry that names no GPU or MIG device of the host's inventory; names the entry,
    what the inventory holds and what is accepted."""

    exit_code = EXIT_USAGE
    code = "invalid-device-selection"
    accepted = ("all, none, void, or a comma list of GPU indices, GPU UUIDs (GPU-...) and MIG devices (MIG-... or "
                "GPU:MIG)")

    def __init__(self, entry: str, reason: str, holds: str) -> None:
        super().__init__(f"device {shorten(entry)}: {reason}; {holds}. Accepted: {self.accepted}")
        self.entry = entry
        self.reason = reason


class InvalidSeed(FakeGPUError):
    """A FAKEGPU_SEED value outside what identities are derived from."""

    exit_code = EXIT_USAGE
    code = "invalid-seed"

    def __init__(self, seed: str, reason: str) -> None:
        super().__init__(f"invalid FAKEGPU_SEED {shorten(seed)}: {reason}")
        self.seed = seed
        self.reason = reason


class ProblemList:
    """Mixed in before a FakeGPUError subclass whose message is a file's problems, one line each (file:line first):
    at most SHOWN of them, then how many more; all of them in `problems`."""

    SHOWN = 10

    def __init__(self, problems: Sequence[str]) -> None:
        shown = list(problems[:self.SHOWN])
        if len(problems) > self.SHOWN:
            shown.append(f"... and {len(problems) - self.SHOWN} more")
        super().__init__("\n".join(shown))  # the FakeGPUError after this class in the MRO
        self.problems = list(problems)


class UsageError(FakeGPUError):
    """A command-line value outside what the command accepts."""

    exit_code = EXIT_USAGE
    code = "usage"


class TraceError(FakeGPUError):
    """A profiler trace that cannot be read as PyTorch writes one: truncated, not JSON, not a Kineto trace, a broken
    gzip stream, or a set of per-rank files with a rank missing; names the file and where reading stopped."""

    exit_code = EXIT_USAGE
    code = "trace-invalid"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
