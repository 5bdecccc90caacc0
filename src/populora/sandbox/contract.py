"""Value types of the sandbox contract (docs/architecture.md): `Limits` of one job and the `Outcome` of one job."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "crashed")

#: Upper bounds of `Limits` fields: beyond these a value is a mistake (or an attack on the worker, which would
#: otherwise overflow an rlimit or a deadline), never a need. Grading's expected outputs use up to 80 million
#: characters, its ground truth 8 GiB.
LIMIT_MAX = {
    "timeout_s": 3600,
    "memory_mb": 65536,
    "max_output_chars": 100_000_000,
    "cpu_s": 3600,
    "file_mb": 4096,
    "tmp_mb": 4096,
    "nofile": 4096,
    "max_stdout_chars": 10_000_000,
}


@dataclass(frozen=True)
class Limits:
    """Per-job limits. `timeout_s` is wall-clock (the job's process group is SIGKILLed when it passes),
    `memory_mb` the address-space limit (RLIMIT_AS), `max_output_chars` the longest accepted `repr` of the
    value (longer gives status `output_limit`, never a truncated value). The rest have safe defaults."""

    timeout_s: float = 5.0
    memory_mb: int = 512
    max_output_chars: int = 4000
    cpu_s: float | None = None
    """RLIMIT_CPU in seconds; default: the timeout rounded up (a backstop; the wall clock usually fires first)."""
    file_mb: float = 16
    """RLIMIT_FSIZE: the largest file the job may write."""
    tmp_mb: int = 32
    """Size of the job's private tmpfs (its working directory, mounted on /tmp)."""
    nofile: int = 64
    """RLIMIT_NOFILE: open file descriptors."""
    max_stdout_chars: int = 2000
    """stdout+stderr the job prints are kept up to this many characters; the rest is dropped."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise one ValueError naming every field that is not a finite positive number of the right type
        within `LIMIT_MAX` (NaN, infinities, zero, negatives, bools, strings and huge values are all refused:
        a zero `tmp_mb` or `nofile`, or a `memory_mb=2**50`, would otherwise break the worker that receives
        it, and NaN compares false with every bound)."""
        problems = []
        ints = {"memory_mb", "max_output_chars", "tmp_mb", "nofile", "max_stdout_chars"}
        for name in (
            "timeout_s",
            "memory_mb",
            "max_output_chars",
            "cpu_s",
            "file_mb",
            "tmp_mb",
            "nofile",
            "max_stdout_chars",
        ):
            v = getattr(self, name)
            if v is None and name == "cpu_s":
                continue
            kind = "a positive integer" if name in ints else "a positive number"
            ok_type = isinstance(v, int) if name in ints else isinstance(v, int | float)
            if isinstance(v, bool) or not ok_type or not math.isfinite(v) or v <= 0:
                problems.append(f"{name} must be {kind}, got {v!r}")
            elif v > LIMIT_MAX[name]:
                problems.append(f"{name} must be at most {LIMIT_MAX[name]}, got {v!r}")
        if not problems and self.memory_mb < 32:
            problems.append(
                f"memory_mb must be >= 32 (the interpreter itself needs it), got {self.memory_mb}"
            )
        if not problems and self.nofile < 8:
            problems.append(f"nofile must be >= 8 (the job's own descriptors), got {self.nofile}")
        if problems:
            raise ValueError("invalid Limits: " + "; ".join(problems))

    def wire(self) -> dict:
        """The limits as the worker reads them."""
        d = asdict(self)
        d["cpu_s"] = self.cpu_s if self.cpu_s is not None else max(1.0, math.ceil(self.timeout_s))
        return d


@dataclass(frozen=True)
class Outcome:
    """How one job ended.

    `status` is one of `STATUSES`; `value_repr` is `repr()` of the call's value when status is `ok`;
    `error_type` names the exception (`"ValueError"`), the signal (`"SIGSEGV"`) or `"Timeout"`/`"Exit"`/
    `"OutputLimit"`; `elapsed_s` is the job's wall time from fork to result. The extra fields are optional:
    `error_message` (bounded), `stdout` (what the job printed, bounded), and `plain`: True when the value was
    built only from exact builtin literal types (int, float, str, bytes, bool, None, Ellipsis, complex, list,
    tuple, dict, set, frozenset), i.e. `populora.sandbox.values.parse_value(value_repr)` reproduces it exactly.
    Outcomes of `timeout`/`crashed` jobs may carry `error_type` "Timeout", a signal name, "Exit" (the job
    left without a result, e.g. `os._exit`), "BadResult" (the job wrote a malformed result on its result pipe)
    or "WorkerDied" (the pool replaced the worker).
    """

    status: str
    value_repr: str | None = None
    error_type: str | None = None
    elapsed_s: float = 0.0
    error_message: str | None = None
    stdout: str = ""
    plain: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return asdict(self)
