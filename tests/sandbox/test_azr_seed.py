"""The real programs in ../shared/data/azr_seed (written by a 7B model) run in the sandbox and reproduce the
outputs AZR recorded for them.

AZR's recorded outputs carry three artefacts of its executor, which this test recognises explicitly (and
counts, so a regression in our sandbox cannot hide behind them): reprs longer than 400 characters were stored
truncated (`first 200 + "..." + last 200`, bug B2 in reference/azr.md), programs using `random`/`secrets` are
not reproducible, and orders of string sets depend on AZR's random hash seed (ours is fixed).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from populora.sandbox import Limits, Sandbox
from populora.sandbox.values import parse_value


def _cases(seed_dir: Path) -> list[tuple[str, str, str]]:
    """(program, input, recorded output): every single-I/O seed, and the first 3 I/O pairs of each code_f seed."""
    cases = []
    for line in (seed_dir / "7b_coder_seed_io.jsonl").read_text().splitlines():
        r = json.loads(line)
        cases.append(("\n".join([*r["imports"], r["snippet"]]), r["input"], r["output"]))
    for line in (seed_dir / "7b_coder_code_f_seed_io.jsonl").read_text().splitlines():
        r = json.loads(line)
        for i, o in list(zip(r["inputs"], r["outputs"], strict=True))[:3]:
            cases.append(("\n".join([*r["imports"], r["snippet"]]), i, o))
    return cases


def _azr_truncate(text: str) -> str:
    text = text.strip()
    return text[:200] + "..." + text[-200:] if len(text) > 400 else text


def test_azr_seed_programs_reproduce_recorded_outputs(shared_data: Path) -> None:
    seed_dir = shared_data / "azr_seed"
    if not seed_dir.is_dir():
        pytest.skip(f"{seed_dir} not found")
    cases = _cases(seed_dir)
    assert len(cases) > 900
    with Sandbox(workers=2, limits=Limits(timeout_s=10, memory_mb=512, max_output_chars=100_000)) as sb:
        outs = sb.run_many([(prog, f"f({inp})") for prog, inp, _ in cases])
        # Recorded outputs that are not literals (e.g. "Counter({...})", "dict(a=1)") are evaluated in the
        # sandbox too, never in this process.
        expected: dict[int, object] = {}
        to_eval = []
        for k, (_, _, rec) in enumerate(cases):
            try:
                expected[k] = parse_value(rec)
            except ValueError:
                to_eval.append(k)
        evals = sb.run_many([(cases[k][0], cases[k][2]) for k in to_eval])
        for k, ev in zip(to_eval, evals, strict=True):
            expected[k] = ("unparsed", ev.value_repr)

    counts: Counter[str] = Counter()
    unexplained = []
    for k, ((prog, inp, rec), out) in enumerate(zip(cases, outs, strict=True)):
        assert out.status == "ok", (prog, inp, out)  # every seed program runs
        exp = expected[k]
        if isinstance(exp, tuple) and exp and exp[0] == "unparsed":
            same = out.value_repr == exp[1]
        else:
            try:
                same = parse_value(out.value_repr) == exp  # AZR compares with ==
            except ValueError:
                same = out.value_repr == rec
        if same:
            counts["exact"] += 1
        elif "..." in rec and _azr_truncate(out.value_repr) == rec.strip():
            counts["azr_truncated"] += 1
        elif "random" in prog or "secrets" in prog:
            counts["random"] += 1
        elif Counter(out.value_repr) == Counter(rec) and ("set(" in prog or "{" in prog):
            counts["set_order"] += 1
        else:
            unexplained.append((prog[:200], inp[:100], rec[:100], out.value_repr[:100]))
    print("seed outcome classes:", dict(counts))
    assert not unexplained, unexplained[:5]
    assert counts["exact"] >= 0.93 * len(cases), counts
    assert counts["azr_truncated"] >= 5, counts  # the artefact this test claims to recognise is really there
