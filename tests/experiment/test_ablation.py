"""`populora experiment ablation --quick` end to end (real trainer, tiny model, sandbox), its resumability,
and the confidence intervals it reports."""

import json
import math

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.experiment.ablation import ARMS, specs
from populora.experiment.measures import mean_ci


def test_mean_ci_is_the_student_t_interval():
    s = mean_ci([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.302653: half-width 4.302653 / sqrt(3)
    assert s["mean"] == 2.0 and s["n"] == 3
    assert math.isclose(s["hi"] - 2.0, 4.302653 / math.sqrt(3), rel_tol=1e-5)
    assert mean_ci([0.5, None, float("nan")]) == {"mean": 0.5, "lo": None, "hi": None, "n": 1}
    assert mean_ci([])["mean"] is None


def test_arms_are_compute_matched_population_settings_only(tmp_path):
    runs = specs(tmp_path, "tiny-learn", [0, 1], quick=False)
    assert [r.meta["arm"] for r in runs] == [a for a in ARMS for _ in range(2)]
    for r in runs:  # an arm changes who plays (the shuffled control also the students' reward), nothing else
        extra = ["rl.student_rewards=shuffled"] if r.meta["arm"] == "shuffled" else []
        assert [o for o in r.overrides[:-1] if not o.startswith("population.")] == extra
        assert r.overrides[-1] == f"train.seed={r.meta['seed']}"


@pytest.mark.timeout(900)
def test_quick_ablation_runs_every_arm_writes_json_and_html_and_resumes(tmp_path):
    out = tmp_path / "abl"
    runner = CliRunner()
    res = runner.invoke(app, ["experiment", "ablation", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "experiment.json").read_text())
    assert data["kind"] == "ablation" and data["quick"] and data["seeds"] == [0]
    assert list(data["results"]) == list(ARMS)
    for arm, entry in data["results"].items():
        (run,) = entry["runs"]
        assert run["steps"] == 2 and run["probe_steps"] == [0, 2]
        roles = {"single"} if arm == "single" else {"teacher", "student"}
        assert set(run["probe"]) == roles
        for role in roles:
            start = run["probe"][role]["all"]["mean"]["start"]
            assert 0.0 <= start <= 1.0
        assert run["step_s"] > 0
        assert f"probe.{sorted(roles)[0]}.all.mean.change" in entry["summary"]
    # the contrasts: every population arm minus single, 2T+2S minus its shuffled control, best vs best-of-k
    c = data["contrasts"]
    assert set(c["differences"]) == {"1T+1S - single", "2T+2S - single", "4T+4S - single", "2T+2S - shuffled"}
    assert all(d["paired"] and d["n_seeds"] == [1, 1] for d in c["differences"].values())
    assert c["best_vs_single"]["4T+4S"]["k"] == 4
    assert "2T+2S - shuffled" in res.output and "best of 4 single seeds" in res.output
    # 4T+4S has four members per role: its rating spread is measured, the single agent has none.
    assert data["results"]["4T+4S"]["runs"][0]["rating_spread"]["teacher"] is not None
    assert data["results"]["single"]["runs"][0]["rating_spread"]["teacher"] is None
    page = (out / "experiment.html").read_text()
    assert "Population-size ablation" in page and page.count("data:image/png;base64") >= 3
    assert "4T+4S" in page
    # The same command again finds every run finished: nothing is retrained, the files are rewritten.
    before = {p: p.stat().st_mtime for p in out.glob("runs/*/seed0/metrics.jsonl")}
    res = runner.invoke(app, ["experiment", "ablation", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.count(": done in") == len(ARMS)
    assert {p: p.stat().st_mtime for p in out.glob("runs/*/seed0/metrics.jsonl")} == before


def test_ablation_refuses_a_preset_without_the_probe(tmp_path):
    res = CliRunner().invoke(app, ["experiment", "ablation", "--preset", "tiny", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "diagnostics.probe_every" in res.output
