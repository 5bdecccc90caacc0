"""Untrusted-code execution for PopuLoRA (docs/architecture.md): a pool of warm, isolated worker processes.

    from populora.sandbox import Sandbox, Limits
    with Sandbox(workers=2, limits=Limits(timeout_s=5, memory_mb=512, max_output_chars=4000)) as sb:
        out = sb.run("def f(x):\n    return x * 2", "f(21)")      # Outcome(status='ok', value_repr='42', ...)
        outs = sb.run_many([(program, call), ...])                  # parallel, order kept
    Sandbox(profile="eval")  # benchmarks: also numpy and threads (evalplus's rules), every OS layer kept

Modules: `contract` (Limits, Outcome), `pool` (Sandbox, the parent side), `worker_handle` (one worker process
seen from the parent: start, frame, shut down), `profiles` (what each profile preloads and allows), `_worker`
(the worker script: the supervisor, with `_isolation`, `_template` (every job is forked from it), `_job`,
`_channel`, `_cleanup`, `_libc`, `_seccomp`), `values` (parsing and comparing `value_repr`s outside the
sandbox), `private` (owner-only run folders), `commands`/`bench`.
"""

from populora.sandbox.contract import STATUSES, Limits, Outcome
from populora.sandbox.pool import (
    DEFAULT_PRELOAD,
    EVAL_IMPORT_PACKAGES,
    EVAL_PACKAGE_PRELOAD,
    EVAL_THREADS,
    LAZY_MODULES,
    Sandbox,
    SandboxError,
    shared_sandbox,
)

__all__ = [
    "DEFAULT_PRELOAD",
    "EVAL_IMPORT_PACKAGES",
    "EVAL_PACKAGE_PRELOAD",
    "EVAL_THREADS",
    "LAZY_MODULES",
    "STATUSES",
    "Limits",
    "Outcome",
    "Sandbox",
    "SandboxError",
    "shared_sandbox",
]
