"""A run folder is data (issue 50 §5): nothing in it can make `populora train --resume` run code, and no file
of it is read or written through a symbolic link or blocks as a FIFO.

Settings that run code (model.trust_remote_code, a model folder inside the run, dist.address) come from the
command line of the resume, never from config.yaml; the run-folder logs are appended and read through
`populora.safe_files` (O_NOFOLLOW | O_NONBLOCK, then fstat: a regular file); a corrupt line is dropped with
a count, on resume as elsewhere. Every test here runs the real CLI or the real run-folder code."""

from __future__ import annotations

import json
import os
import threading

import pytest
import yaml
from typer.testing import CliRunner

from populora.cli import app
from populora.config import load_config, to_yaml
from populora.train.run_folder import RunFolder

EVIL = """from pathlib import Path
Path({marker!r}).write_text("ran")
raise RuntimeError("the run folder's model code ran")
"""


def _run_with_evil_model(tmp_path, **model):
    """A run folder (no checkpoint yet) whose config.yaml names a model folder inside it, with Python code
    that leaves a marker file when imported (config.json's and tokenizer_config.json's auto_map)."""
    run = tmp_path / "run"
    folder = run / "model"
    folder.mkdir(parents=True)
    marker = tmp_path / "PWNED"
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    auto = {
        "AutoConfig": "evil.Cfg",
        "AutoModelForCausalLM": "evil.Model",
        "AutoTokenizer": ["evil.Tok", None],
    }
    (folder / "config.json").write_text(
        json.dumps({"model_type": "evil", "auto_map": auto, "hidden_size": 8, "num_hidden_layers": 1})
    )
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": auto}))
    cfg = yaml.safe_load(to_yaml(load_config("tiny")))
    cfg["model"].update(name=str(folder), device="cpu", **model)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run, marker


def _cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def test_resume_never_takes_trust_remote_code_from_the_folder(tmp_path):
    run, marker = _run_with_evil_model(tmp_path, trust_remote_code=True)
    res = _cli("train", "-q", "--resume", run)
    assert not marker.exists(), "the run folder's model code ran on --resume"
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "model.trust_remote_code: true" in lines[0]
    assert "pass --set model.trust_remote_code=true yourself" in lines[0]


def test_resume_accepts_trust_remote_code_false(tmp_path):
    run, marker = _run_with_evil_model(tmp_path, trust_remote_code=True)
    # what the resume would use: accepted (today's main refused the key on --resume)
    res = _cli("train", "--resume", run, "--help-config", "--set", "model.trust_remote_code=false",
               "--set", f"model.name={run / 'model'}")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "model.trust_remote_code" in res.output
    # and the resume itself: the model's code is refused by transformers, never run
    res = _cli("train", "-q", "--resume", run, "--set", "model.trust_remote_code=false",
               "--set", f"model.name={run / 'model'}")  # fmt: skip
    assert not marker.exists()
    assert res.exit_code == 2 and "runs its own Python code" in res.output, res.output


def test_model_inside_the_run_folder_needs_the_command_line(tmp_path):
    run, marker = _run_with_evil_model(tmp_path)
    res = _cli("train", "--resume", run, "--help-config")
    assert res.exit_code == 2 and "a folder inside the run folder" in res.output, res.output
    assert f"--set model.name={run / 'model'}" in res.output
    ok = _cli("train", "--resume", run, "--help-config", "--set", f"model.name={run / 'model'}")
    assert ok.exit_code == 0, ok.output
    other = _cli("train", "--resume", run, "--help-config", "--set", "model.name=tiny")
    assert other.exit_code == 2 and "cannot change on --resume" in other.output  # the same model only
    assert not marker.exists()


def test_ray_address_from_the_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = yaml.safe_load(to_yaml(load_config("tiny")))
    cfg["dist"].update(workers=2, address="203.0.113.9:6379")
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = _cli("train", "--resume", run, "--help-config")
    assert res.exit_code == 2 and "dist.address '203.0.113.9:6379'" in res.output, res.output
    ok = _cli("train", "--resume", run, "--help-config", "--set", "dist.address=auto")
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize("name", ["events.jsonl", "problems.jsonl", "metrics.jsonl"])
def test_logs_are_never_appended_through_a_link(tmp_path, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    dangling, existing = outside / "created.txt", outside / "authorized_keys"
    existing.write_text("ssh-ed25519 AAAA mine\n")
    folder = RunFolder(run)
    write = {"events.jsonl": folder.event, "problems.jsonl": folder.problem, "metrics.jsonl": folder.metric}[
        name
    ]
    for target in (dangling, existing):
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(target)
        with pytest.raises(OSError, match="is a symbolic link, not a regular file"):
            write({"step": 1, "type": "x"})
    assert not dangling.exists()  # a dangling link created nothing outside the folder
    assert existing.read_text() == "ssh-ed25519 AAAA mine\n"
    folder.close()


def test_train_refuses_a_linked_log_in_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    res = _cli("train", "-q", "--run-dir", run, "train.steps=1")
    assert res.exit_code == 2, res.output
    assert "events.jsonl is a symbolic link" in res.output and res.output.count("\n") == 1
    assert not (tmp_path / "elsewhere.jsonl").exists()


def _in_thread(fn, *args):
    """`fn(*args)` in a daemon thread, joined for at most 60 s: a FIFO opened for reading blocks forever on
    today's main, and the test must fail, not hang (a liveness check, not a timing one)."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["error"] = err

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), f"{fn.__name__} blocked on a FIFO"
    return box


def test_report_refuses_a_fifo_log_in_one_line(tmp_path):
    from populora.report.synthetic import write_synthetic_run

    run = tmp_path / "run"
    write_synthetic_run(run, steps=4)
    (run / "events.jsonl").unlink()
    os.mkfifo(run / "events.jsonl")
    res = _in_thread(_cli, "report", run)["value"]
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "events.jsonl is a FIFO (named pipe)" in res.output


def test_rng_fifo_is_a_damaged_file_not_a_hang(tmp_path):
    from populora.train.state_files import read_rng

    os.mkfifo(tmp_path / "rng.json")
    box = _in_thread(read_rng, tmp_path / "rng.json")
    assert "FIFO" in str(box.get("error")), box


def test_resume_repair_drops_corrupt_lines_with_a_count(tmp_path, capsys):
    run = tmp_path / "run"
    folder = RunFolder(run)
    for s in (1, 2, 3):
        folder.metric({"step": s})
        folder.problem({"step": s, "valid": True})
    with open(run / "problems.jsonl", "a") as fh:
        fh.write('{"step": null}\n{"step": "2"}\n[1, 2]\n')
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write("not json\n")
    removed = folder.repair(2)  # a traceback on today's main (int(None))
    assert removed == {"metrics.jsonl": 2, "problems.jsonl": 4, "events.jsonl": 0}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "3 from problems.jsonl" in err[0] and "1 from metrics.jsonl" in err[0]
    assert [r["step"] for r in folder.read("problems.jsonl")] == [1, 2]
    folder.close()


def test_temp_names_planted_as_links_are_not_written_through(tmp_path):
    """The trainer's config.yaml and eval's samples are written under temp names first; a link planted under
    such a name (the folder is someone else's) is replaced, never written through."""
    from populora.evaluate.runner import SampleLog
    from populora.train.run_folder import write_text_atomic

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    (run / f".config.yaml.{os.getpid()}.tmp").symlink_to(victim)
    write_text_atomic(run / "config.yaml", "train: {steps: 1}\n")
    assert (run / "config.yaml").read_text() == "train: {steps: 1}\n"
    assert victim.read_text() == "precious\n" and not (run / "config.yaml").is_symlink()
    (run / "eval" / "samples.partial.jsonl").symlink_to(victim)
    log = SampleLog(run / "eval" / "samples.partial.jsonl", [])
    log("T0", [], [])
    assert victim.read_text() == "precious\n"
    assert not (run / "eval" / "samples.partial.jsonl").is_symlink()
