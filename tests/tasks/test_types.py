import dataclasses

import pytest

from populora.tasks import FormatError, Invalid, Problem


def _p(**kw):
    base = dict(task="code_o", program="def f(a):\n    return a", inputs=("1",), outputs=("1",))
    return Problem(**{**base, **kw})


def test_id_is_a_stable_content_hash():
    p = _p()
    # Frozen value: a change here silently breaks buffers and problems.jsonl across versions.
    assert p.id == "f86416ddb67d3275"  # sha256(json [task, program, inputs, outputs, message])[:16]
    assert _p(proposer="T3", step=7).id == p.id  # origin is not content
    assert _p(outputs=("2",)).id != p.id
    assert _p(task="code_i").id != p.id
    assert p.retask("code_i").id == _p(task="code_i").id


def test_json_round_trip_keeps_everything():
    p = Problem(
        "code_f",
        "def f(x):\n    return {x: 'é'}",
        ["1", "'a'"],
        ["{1: 'é'}", "{'a': 'é'}"],
        message="map to 'é'",
        proposer="T1",
        step=12,
    )
    q = Problem.from_json(p.to_json())
    assert q == p and q.id == p.id and q.proposer == "T1" and q.step == 12
    assert q.given == [("1", "{1: 'é'}")] and q.hidden == [("'a'", "{'a': 'é'}")]


def test_from_json_detects_edited_content():
    d = _p().to_dict()
    d["outputs"] = ["2"]
    with pytest.raises(ValueError, match="id mismatch"):
        Problem.from_dict(d)


def test_frozen_and_checked():
    p = _p()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.program = "x"  # type: ignore[misc]
    with pytest.raises(ValueError):
        _p(outputs=("1", "2"))
    with pytest.raises(ValueError):
        _p(task="code_x")
    assert hash(p) == hash(_p())


def test_failure_values_are_falsy():
    assert not FormatError("x") and not Invalid("y")


def test_code_f_split_halves():
    p = Problem(
        "code_f", "def f(a):\n    return a", [str(i) for i in range(10)], [str(i) for i in range(10)], "m"
    )
    assert p.n_given == 5 and [i for i, _ in p.hidden] == ["5", "6", "7", "8", "9"]
