"""A run folder is data, never code (issue 29): a crafted pickle in a checkpoint is not run on resume, member
ids from state.json cannot name paths outside the run, and a checkpoint file that loads but does not fit
(wrong keys, shapes or types) is reported as damaged, so resume falls back to the previous checkpoint with one
warning. Run on a real two-checkpoint tiny run; the file-level cases go through `read_checkpoint` directly."""

import json
import os
import shutil
import traceback
from types import SimpleNamespace

import pytest
import torch
from test_progress import FAST  # same folder: pytest puts it on sys.path
from typer.testing import CliRunner

from populora.cli import app
from populora.lora.peft_io import load_peft
from populora.tasks.buffers import TaskBuffers
from populora.train import state_files as sf
from populora.train.checkpoint import CheckpointDamaged, list_checkpoints, read_checkpoint
from populora.train.launch import train


@pytest.fixture(scope="module")
def two_ckpt_run(tmp_path_factory, model_name):
    run = tmp_path_factory.mktemp("untrusted") / "run"
    sets = [*FAST, f"model.name={model_name}", "train.steps=2", "train.checkpoint_every=1"]
    train(preset="tiny", run_dir=run, overrides=[*sets, "train.keep_checkpoints=0"], quiet=True)
    assert [s for s, _ in list_checkpoints(run)] == [1, 2]
    return run


def _copy(run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out, out / "checkpoints" / "step_000002"


def _read(ckpt, like=None):
    return read_checkpoint(ckpt, load_peft, TaskBuffers.load, optimizer_like=like)


class _RunsCode:
    """Pickles to a call of os.system: what a crafted rng.pt / optimizer.pt holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _resume(run) -> SimpleNamespace:
    """`populora train --resume` as a user runs it, in this process (typer's CliRunner: no fresh torch import
    per call); an exception escaping the CLI is put on stderr as its traceback, which the checks refuse."""
    res = CliRunner().invoke(app, ["train", "-q", "--resume", str(run), "--set", "train.steps=2"])
    err = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        err += "".join(traceback.format_exception(res.exception))
    return SimpleNamespace(returncode=res.exit_code, stderr=err)


def _fell_back_once(res, needle):
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    warn = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "step_000002" in warn[0] and needle in warn[0], res.stderr
    assert "resuming from step_000001" in warn[0]


def test_crafted_legacy_pickle_is_not_run_on_resume(two_ckpt_run, tmp_path):
    run, ckpt = _copy(two_ckpt_run, tmp_path)
    marker = tmp_path / "pwned"
    (ckpt / sf.RNG_FILE).unlink()  # an older run folder: rng.pt is what resume reads
    torch.save({"python": _RunsCode(marker)}, ckpt / sf.LEGACY_RNG_FILE)
    res = _resume(run)
    assert not marker.exists()  # the pickle's os.system never ran
    _fell_back_once(res, "rng.pt cannot be read (StateFileError: it holds objects other than tensors")
    assert (run / "checkpoints" / "damaged-step_000002" / "rng.pt").is_file()  # kept for inspection


def test_crafted_optimizer_pickle_is_not_run(two_ckpt_run, tmp_path):
    _, ckpt = _copy(two_ckpt_run, tmp_path)
    marker = tmp_path / "pwned"
    (ckpt / sf.OPTIMIZER_FILE).unlink()
    torch.save({"steps": _RunsCode(marker)}, ckpt / sf.LEGACY_OPTIMIZER_FILE)
    with pytest.raises(CheckpointDamaged, match="optimizer.pt cannot be read"):
        _read(ckpt)
    assert not marker.exists()


def test_legacy_pt_files_still_resume(two_ckpt_run, tmp_path):
    """A checkpoint written before issue 29 (torch.save of the same states) reads back the same."""
    _, ckpt = _copy(two_ckpt_run, tmp_path)
    new = _read(ckpt)
    torch.save(new["optimizer"], ckpt / sf.LEGACY_OPTIMIZER_FILE)
    torch.save(new["rng"], ckpt / sf.LEGACY_RNG_FILE)
    (ckpt / sf.OPTIMIZER_FILE).unlink()
    (ckpt / sf.RNG_FILE).unlink()
    old = _read(ckpt, like=new["optimizer"])
    assert sf.misfit(old["optimizer"], new["optimizer"]) is None
    assert torch.equal(old["optimizer"]["exp_avg"][0], new["optimizer"]["exp_avg"][0])
    assert old["rng"]["python"] == new["rng"]["python"]
    assert (old["rng"]["numpy"][1] == new["rng"]["numpy"][1]).all()


def test_member_id_outside_the_run_is_refused(two_ckpt_run, tmp_path):
    run, ckpt = _copy(two_ckpt_run, tmp_path)
    outside = tmp_path / "x"  # what `adapters/../../../x` would reach
    shutil.copytree(ckpt / "adapters" / "T0", outside)
    before = sorted(p.name for p in outside.iterdir())
    state = json.loads((ckpt / "state.json").read_text())
    for key in ("population", None):
        members = state[key]["members"] if key else state["members"]
        members[0]["id"] = "../../../x"
    (ckpt / "state.json").write_text(json.dumps(state))
    res = _resume(run)
    _fell_back_once(res, "member id '../../../x' is not an id")
    assert sorted(p.name for p in outside.iterdir()) == before  # neither read as a member nor overwritten
    assert [s for s, _ in list_checkpoints(run)] == [1, 2]  # step 2 re-run and saved inside the run


def _edit_json(path, fn):
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj))


def _set(path_keys, value):
    def fn(obj):
        node = obj
        for k in path_keys[:-1]:
            node = node[k]
        node[path_keys[-1]] = value

    return fn


STATE_MISFITS = {
    "no population": (lambda s: s.pop("population"), "lacks the population"),
    "slot is text": (_set(["population", "members", 0, "slot"], "zero"), "is not a distinct slot"),
    "two members, one slot": (_set(["population", "members", 1, "slot"], 0), "is not a distinct slot"),
    "unknown member key": (_set(["population", "members", 0, "shell"], "rm -rf"), "unknown keys"),
    "rating is text": (_set(["population", "members", 0, "mu"], "high"), "finite numbers"),
    "negative cell": (_set(["coverage", "cells"], [-1]), "coverage cells"),
    "coverage missing": (lambda s: s.pop("coverage"), "coverage lacks n_cells"),
    "next_index keys": (_set(["population", "next_index"], {"../": 1}), "next_index"),
}


@pytest.mark.parametrize("case", sorted(STATE_MISFITS))
def test_state_json_that_does_not_fit_is_damaged(two_ckpt_run, tmp_path, case):
    _, ckpt = _copy(two_ckpt_run, tmp_path)
    fn, needle = STATE_MISFITS[case]
    _edit_json(ckpt / "state.json", fn)
    with pytest.raises(CheckpointDamaged, match="state.json does not fit") as err:
        _read(ckpt)
    assert needle in str(err.value)


RNG_MISFITS = {
    "no torch": lambda r: r.pop("torch"),
    "numpy words short": _set(["numpy", "state"], [1, 2, 3]),
    "numpy word too big": _set(["numpy", "state", 0], 2**40),
    "python state short": _set(["python", "state"], [1, 2]),
    "python version": _set(["python", "version"], 99),
    "torch bytes short": _set(["torch"], "00ff"),
    "torch not hex": _set(["torch"], "zz"),
    "not an object": lambda r: r.clear(),
}


@pytest.mark.parametrize("case", sorted(RNG_MISFITS))
def test_rng_json_that_does_not_fit_is_damaged(two_ckpt_run, tmp_path, case):
    _, ckpt = _copy(two_ckpt_run, tmp_path)
    _edit_json(ckpt / sf.RNG_FILE, RNG_MISFITS[case])
    with pytest.raises(CheckpointDamaged, match="rng.json cannot be read"):
        _read(ckpt)


def _edit_tree(path, fn):
    tree = sf.read_tree(path)
    fn(tree)
    sf.write_tree(path, tree)


OPTIMIZER_MISFITS = {
    "moment of another shape": lambda t: t["exp_avg"].__setitem__(0, torch.zeros(3, 3)),
    "one moment missing": lambda t: t["exp_avg_sq"].pop(),
    "steps of another length": lambda t: t.__setitem__("steps", torch.zeros(99)),
    "unknown key": lambda t: t.__setitem__("extra", 1),
    "betas are text": lambda t: t.__setitem__("betas", ("a", "b")),
    "eps is NaN": lambda t: t.__setitem__("eps", float("nan")),
}


@pytest.mark.parametrize("case", sorted(OPTIMIZER_MISFITS))
def test_optimizer_state_that_does_not_fit_is_damaged(two_ckpt_run, tmp_path, case):
    _, ckpt = _copy(two_ckpt_run, tmp_path)
    like = _read(ckpt)["optimizer"]  # the layout of the engine that wrote it
    _edit_tree(ckpt / sf.OPTIMIZER_FILE, OPTIMIZER_MISFITS[case])
    with pytest.raises(CheckpointDamaged, match="optimizer.safetensors does not fit this run"):
        _read(ckpt, like=like)


def test_resume_falls_back_on_a_misfit_optimizer(two_ckpt_run, tmp_path):
    run, ckpt = _copy(two_ckpt_run, tmp_path)
    _edit_tree(ckpt / sf.OPTIMIZER_FILE, OPTIMIZER_MISFITS["moment of another shape"])
    _fell_back_once(_resume(run), "does not fit this run")


def test_tree_round_trip_keeps_types(tmp_path):
    tree = {"a": [torch.arange(3), (1.5, None)], "b": {"c": torch.ones(2, 2, dtype=torch.bfloat16)}, "d": "x"}
    sf.write_tree(tmp_path / "t.safetensors", tree)
    back = sf.read_tree(tmp_path / "t.safetensors")
    assert back["a"][1] == (1.5, None) and back["d"] == "x"
    assert torch.equal(back["a"][0], tree["a"][0]) and back["b"]["c"].dtype == torch.bfloat16
    assert sf.misfit(back, tree) is None
