"""`populora bench population --quick --no-scaling` end to end on the bundled model: the six `tiny-learn`
trainers of the speed comparison run, their checks hold (the lean path makes the forward loop's tokens, overlap
changes no result, the prefill's thread count no token), and the JSON holds every row and ratio the docs read."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from populora.cli import app
from populora.train.bench import PATHS, SPEED_PHASES


def test_bench_population_speed_part(tmp_path):
    out = tmp_path / "population.json"
    res = CliRunner().invoke(app, ["bench", "population", "--quick", "--no-scaling", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    speed = data["speed"]
    assert [r["path"] for r in speed["rows"]] == [name for name, *_ in PATHS]
    assert speed["identical_generations"] is True  # forward vs lean: the same tokens
    assert speed["overlap"]["identical_results"] is True
    assert speed["prefill"]["identical_generations"] is True  # prefill on 1 or train.threads threads
    for row in speed["rows"]:
        assert row["steps_timed"] == 2  # --quick: 3 steps, the first untimed
        assert set(row["phase_s_mean"]) == set(SPEED_PHASES)
        assert row["gen_tokens_per_step"] > 0 and row["trainer_gen_tokens_per_cpu_s"] > 0
    by = {r["path"]: r for r in speed["rows"]}
    # the same seed and the same tokens: every float32 row generates exactly as much as the old path
    for name in ("new", "overlap", "prefill1"):
        assert by[name]["gen_tokens_per_step"] == by["old"]["gen_tokens_per_step"]
    assert data["trainer_gen_tokens_per_cpu_s"] == by["new"]["trainer_gen_tokens_per_cpu_s"]
    assert speed["speedup_step"] > 0 and speed["prefill"]["speedup_step"] > 0
    assert 0 < speed["engine_share_of_limit"] < 1
    # the summary line names the new comparison (rich wraps it at 150 columns: compare words, not lines)
    assert "Prefill on train.threads: step" in " ".join(res.output.split())
    assert "int8 generation (model.gen_dtype): step" in " ".join(res.output.split())
    assert speed["int8"]["speedup_step_old_vs_int8"] > 0 and by["int8"]["overrides"] == [
        "model.gen_dtype=int8"
    ]
