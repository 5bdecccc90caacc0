"""The HTML report and comparison page on synthetic runs, including partial and broken run folders."""

import base64
import io
import re
import shutil

import pytest
from PIL import Image
from typer.testing import CliRunner

from populora.cli import app
from populora.diagnostics.run import NotARunError, load_run
from populora.diagnostics.schema import PHASES, check_run
from populora.report import render_report, write_compare, write_report
from populora.report.synthetic import write_synthetic_run

IMG = re.compile(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


def images(html):
    out = []
    for alt, b64 in IMG.findall(html):
        im = Image.open(io.BytesIO(base64.b64decode(b64)))
        out.append((alt, im.size))
    return out


def test_synthetic_runs_follow_the_contract(pop_run, single_run):
    assert check_run(pop_run) == []
    assert check_run(single_run) == []
    run = load_run(single_run)
    assert run.members == ["A0"] and run.mode == "single"
    assert not run.events_of("evolution")


def test_population_report(pop_report):
    html = pop_report.read_text()
    assert pop_report.name == "report.html"
    imgs = images(html)
    alts = [a for a, _ in imgs]
    assert alts == [
        "Rewards and valid proposals",
        "Invalid proposals by reason",
        "Solve rate per task type",
        "Policy entropy and response length",
        "TrueSkill ratings",
        "Games won, drawn and lost",
        "Student × teacher solve rates",
        "Evolution: operator usage and child recovery",
        "Problem complexity",
        "Problem-space coverage",
        "Time per step by phase",
    ]
    assert all(w >= 300 and h >= 150 for _, (w, h) in imgs)
    # one explanatory sentence per plot, plus the run's own numbers in them
    assert html.count('<p class="cap">') == len(imgs) + 1  # +1: the example problems' caption
    assert "direction changes" in html and "children recovered" in html and "cells)" in html
    # header: config summary; notes about the cut line; examples early and late with their metrics
    assert "3T+3S" in html and "evolution every" in html
    assert "ends with a cut line" in html
    assert "Early: step 1" in html and "Late: step 24" in html
    assert re.search(r"AST depth \d+, cyclomatic \d+, \d+ LOC", html)
    text = IMG.sub("", html).lower().replace("nats/token", "")
    assert not re.search(r"\bnan\b|\binf\b", text)
    # self-contained: no external resources, no scripts
    assert not re.search(r'(src|href)="(https?:|//)', html) and "<script" not in html


def test_single_mode_report(single_report):
    html = single_report.read_text()
    alts = [a for a, _ in images(html)]
    assert "TrueSkill ratings" not in alts and "Student × teacher solve rates" not in alts
    assert "A single-agent run has no ratings." in html and "A single-agent run does not evolve." in html
    assert {"Solve rate per task type", "Problem complexity", "Problem-space coverage"} <= set(alts)
    assert "the single agent" in html and "ends with a cut line" not in html


def test_one_step_run_and_missing_files(tmp_path, pop_run):
    one = write_synthetic_run(tmp_path / "one", steps=1, evolve_every=0, teachers=2, students=2)
    (one / "eval").mkdir()
    (one / "eval" / "results.json").write_text(
        '{"summary": {"Base": {"humaneval+": 0.1, "code_avg": 0.1, "math_avg": null, "overall": 0.1},'
        ' "Student best": {"humaneval+": 0.185, "code_avg": 0.185, "math_avg": null, "overall": 0.185}}}'
    )
    html = render_report(load_run(one))
    assert "Only one step is logged" in html and "No evolution event yet." in html
    assert "Held-out evaluation" in html and "<td>18.5</td>" in html and "math average" not in html
    assert len(images(html)) >= 6
    # metrics only (no config, problems or events)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(pop_run / "metrics.jsonl", bare / "metrics.jsonl")
    html = render_report(load_run(bare))
    assert "config.yaml is missing" in html and "No valid problem with program text" in html
    assert "Problem complexity" in [a for a, _ in images(html)]  # from the metrics' complexity summaries
    # config only: a run that has not finished its first step
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(pop_run / "config.yaml", fresh / "config.yaml")
    out = write_report(fresh)
    html = out.read_text()
    assert "No training step has been logged yet." in html and images(html) == []


def test_not_a_run_folder(tmp_path):
    with pytest.raises(NotARunError):
        write_report(tmp_path)
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "is not a run folder" in res.output and "Traceback" not in res.output


def test_cli_report_and_compare(tmp_path, pop_run, single_run):
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(single_run), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r.html").exists()
    res = runner.invoke(app, ["compare", str(pop_run), "--out", str(tmp_path / "c.html")])
    assert res.exit_code == 2 and "at least two" in res.output
    res = runner.invoke(
        app, ["compare", str(pop_run), str(tmp_path / "missing"), "--out", str(tmp_path / "c.html")]
    )
    assert res.exit_code == 2 and "does not exist" in res.output


def test_compare_overlays_runs(tmp_path, pop_run, single_run):
    # two runs with the same folder name still get distinct legend labels
    twin = tmp_path / "other" / "pop"
    shutil.copytree(pop_run, twin)
    out = write_compare([pop_run, single_run, twin], tmp_path / "sub" / "cmp.html")
    html = out.read_text()
    alts = [a for a, _ in images(html)]
    assert alts == [
        "Solve rate",
        "Problem complexity",
        "Problem-space coverage",
        "Valid proposals",
        "Policy entropy",
        "Response length",
        "Reward",
    ]
    assert "single (single agent)" in html and "pop (3T+3S) [other/pop]" in html
    assert html.count("<tr>") == 4  # header + 3 runs
    assert "direction changes i / o / f" in html and "Example problems at matched steps" in html


def test_run_where_every_proposal_is_invalid(tmp_path):
    """An untrained model's first steps: nothing valid, so only rewards, reasons, ratings, timing to show."""
    from populora.diagnostics.sinks import append_jsonl

    null_sr = {"code_i": None, "code_o": None, "code_f": None, "all": None}
    for step in (1, 2, 3):
        members = {}
        for mid, role in (("T0", "teacher"), ("S0", "student")):
            teacher = role == "teacher"
            members[mid] = {
                "role": role,
                "reward": -1.0 if teacher else None,
                "valid_rate": 0.0 if teacher else None,
                "solve_rate": dict(null_sr),
                "response_len": 90.0 if teacher else None,
                "entropy": 7.3 if teacher else None,
                "mu": 20.0 + step,
                "sigma": 7.0,
                "loss": 0.0,
                "grad_norm": 0.0,
                "complexity": None,
                "n_valid": 0 if teacher else None,
                "n_proposed": 2 if teacher else None,
            }
        append_jsonl(
            tmp_path / "metrics.jsonl",
            {
                "step": step,
                "time": 1.0 * step,
                "mode": "population",
                "phase_s": {**dict.fromkeys(PHASES, 0.0), "teacher": 9.0, "update": 4.0},
                "tokens_per_s": 100.0,
                "tokens": 900,
                "coverage": 0.0,
                "coverage_cells": 0,
                "members": members,
                "matchups": [{"teacher": "T0", "student": "S0", "solve_rate": None, "n_problems": 0}],
                # every proposal invalid: each is a student point, so the student wins every game
                "games": {"T0": {"win": 0, "draw": 0, "loss": 1}, "S0": {"win": 1, "draw": 0, "loss": 0}},
            },
        )
        for reason in ("format: no ```python block", "nondeterministic"):
            append_jsonl(
                tmp_path / "problems.jsonl",
                {
                    "step": step,
                    "proposer": "T0",
                    "solver": "S0",
                    "task": "code_o",
                    "valid": False,
                    "reason": reason,
                    "id": None,
                    "program": None,
                    "inputs": None,
                    "outputs": None,
                    "message": "",
                    "solve_rate": None,
                    "features": None,
                },
            )
    (tmp_path / "config.yaml").write_text("population: {mode: population, teachers: 1, students: 1}\n")
    assert check_run(tmp_path) == []
    html = write_report(tmp_path).read_text()
    alts = [a for a, _ in images(html)]
    assert alts == [
        "Rewards and valid proposals",
        "Invalid proposals by reason",
        "Policy entropy and response length",
        "TrueSkill ratings",
        "Games won, drawn and lost",
        "Time per step by phase",
    ]
    assert "No valid problem yet, so nothing to solve." in html
    assert "No matchup has produced a valid problem yet." in html
    assert "No cell filled yet" in html and "6 of 6 proposals were invalid" in html
