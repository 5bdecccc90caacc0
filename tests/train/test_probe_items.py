"""The probe item by item (train/probe.py): per-item verdicts, answers with their style forced, and the reader
`Run.probe_items` (diagnostics/run.py)."""

import json

import pytest

from populora import tasks
from populora.config import ConfigError, load_config
from populora.diagnostics.run import load_run
from populora.engine import Generation, GenRequest
from populora.pretrain.trace import render_trace
from populora.sandbox import Sandbox
from populora.train.probe import (
    ANSWER_STYLES,
    ProbeScores,
    answer_style,
    probe_line,
    probe_members,
    probe_subset,
)
from populora.train.setup import build_engine

STYLES = ANSWER_STYLES["compact"]
TRACE, BARE = STYLES["code_o"]["trace"], STYLES["code_o"]["bare"]


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


class StyleEngine:
    """code_o only. Slot 0 answers free with the trace and the right output; forced bare, a wrong output.
    Slot 1 answers free bare and wrong; forced to trace, the trace and the right output. Parsing and scoring
    stay real; every request is kept."""

    def __init__(self, problems):
        t = tasks.get("code_o")
        self.prompts = {t.student_prompt(p, template="compact"): p for p in problems}
        self.requests: list[GenRequest] = []

    def generate(self, requests, seed=None, **kw):
        self.requests += requests
        out = []
        for r in requests:
            forced = next((o for o in (TRACE, BARE) if r.prompt.endswith(o)), "")
            p = self.prompts[r.prompt[: len(r.prompt) - len(forced)]]
            gold = f"```output\n{p.outputs[0]}\n```"
            traced = render_trace(p.program, p.inputs[0]) or f"{TRACE}x = 1\n```\n"
            wrong = "```output\n'not it'\n```"
            if r.slot == 0:
                text = {"": traced + gold, BARE: wrong}[forced]
            else:
                text = {"": wrong, TRACE: traced + gold}[forced]
            out.append(Generation([1], text[len(forced) :], [0.0], "stop", slot=r.slot))
        return out


def test_forced_styles_reuse_the_free_answer_and_score_style_and_skill_apart(sandbox):
    problems = {"code_o": probe_subset(4, ["code_o"])["code_o"]}
    engine = StyleEngine(problems["code_o"])
    s = probe_members(engine, {"S0": 0, "S1": 1}, problems, sandbox, styles=STYLES)
    # 8 free answers, then ONE forced answer per (member, item): the style the free answer did not take
    assert len(engine.requests) == 8 + 8
    forced = engine.requests[8:]
    assert all(r.prompt.endswith(BARE) for r in forced if r.slot == 0)
    assert all(r.prompt.endswith(TRACE) for r in forced if r.slot == 1)
    assert {r.temperature for r in engine.requests} == {0.0}
    assert s.accuracy() == {"S0": {"code_o": 1.0}, "S1": {"code_o": 0.0}}
    assert s.style == {"S0": {"code_o": ["trace"] * 4}, "S1": {"code_o": ["bare"] * 4}}
    assert s.style_summary() == {
        "S0": {"code_o": {"free": 1.0, "trace": 1.0, "bare": 0.0, "trace_share": 1.0}},
        "S1": {"code_o": {"free": 0.0, "trace": 1.0, "bare": 0.0, "trace_share": 0.0}},
    }
    for (which, _, _, _), text in s.texts.items():
        if which != "free":
            assert text.startswith(STYLES["code_o"][which])  # a forced answer starts with its opening
    rec = s.items_record(7)
    assert rec["step"] == 7 and rec["items"]["code_o"]["index"] == [0, 1, 2, 3]
    assert rec["items"]["code_o"]["id"] == [p.id for p in problems["code_o"]]
    assert rec["answers"]["free"] == {"S0": {"code_o": [1, 1, 1, 1]}, "S1": {"code_o": [0, 0, 0, 0]}}
    assert rec["answers"]["bare"]["S0"] == {"code_o": [0, 0, 0, 0]}


def test_answer_style_reads_the_opening_line():
    assert answer_style(TRACE + "n = 1\n```\n```output\n1\n```", STYLES["code_o"]) == "trace"
    assert answer_style("```output\n1\n```", STYLES["code_o"]) == "bare"
    assert answer_style("1", STYLES["code_o"]) is None
    assert ANSWER_STYLES.get("azr") is None  # templates with one answer style force nothing


def test_forced_answers_on_the_bundled_model_are_greedy_continuations_and_deterministic(sandbox):
    cfg = load_config("tiny", ["population.teachers=1", "population.students=1", "train.threads=1"])
    engine = build_engine(cfg)
    try:
        problems = {"code_i": probe_subset(2)["code_i"], "code_o": probe_subset(6)["code_o"]}
        slots = {"T0": 0, "S0": 1}
        # budgets the answers end well inside: a free answer's budget counts its opening, a forced one's not
        budget = {"code_i": 64, "code_o": 256}
        a = probe_members(engine, slots, problems, sandbox, styles=STYLES, max_new_tokens=budget)
        b = probe_members(engine, slots, problems, sandbox, styles=STYLES, max_new_tokens=budget)
        # greedy decoding: the same answers and verdicts every time
        assert a.texts == b.texts and a.correct == b.correct and a.style == b.style
        assert set(a.correct) == {"free", "trace", "bare"} and set(a.correct["trace"]["S0"]) == {"code_o"}
        # each forced answer is the opening plus the greedy continuation of prompt + opening, including the
        # one reused from the free answer
        t = tasks.get("code_o")
        for style, opening in STYLES["code_o"].items():
            reqs = [
                GenRequest(1, t.student_prompt(p, template="compact") + opening, budget["code_o"], 0.0)
                for p in problems["code_o"]
            ]
            direct = [opening + g.text for g in engine.generate(reqs, seed=0)]
            assert [a.texts[style, "code_o", i, "S0"] for i in range(6)] == direct
    finally:
        engine.close()


def test_probe_size_defaults_tiny_learns_graded_260_and_the_ceilings():
    assert load_config("tiny").diagnostics.probe_size == 256
    cfg = load_config("tiny-learn")
    assert cfg.diagnostics.probe_size == 260 and cfg.diagnostics.probe_set == "graded"
    assert {t: len(ps) for t, ps in probe_subset(256).items()} == {
        "code_i": 256,
        "code_o": 256,
        "code_f": 256,
    }
    with pytest.raises(ConfigError, match="diagnostics.probe_size"):
        load_config("tiny", ["diagnostics.probe_set=fixed", "diagnostics.probe_size=257"])


def test_probe_line_reads_roles_styles_and_seconds():
    rec = {
        "probe": {
            "S0": {"code_i": 0.5, "code_o": 0.25, "code_f": 0.0},
            "S1": {"code_i": 0.5, "code_o": 0.75, "code_f": 1.0},
            "T0": {"code_i": 1.0, "code_o": 0.0, "code_f": 0.5},
        },
        "probe_style": {
            m: {"code_o": {"free": 0.5, "trace": tr, "bare": 0.25, "trace_share": sh}}
            for m, tr, sh in (("S0", 0.5, 0.0), ("S1", 1.0, 0.5), ("T0", 0.0, 0.0))
        },
        "probe_valid": {"T0": {"code_i": 0.5, "code_o": 1.0}},
        "probe_s": 12.34,
    }
    line = probe_line(10, 30, rec, {"S0": "student", "S1": "student", "T0": "teacher"})
    assert line == (
        "probe    10/30  students code_i 0.50 code_o 0.50 (trace 0.75, bare 0.25, traced 0.25) code_f 0.50"
        "  |  teachers code_i 1.00 code_o 0.00 (trace 0.00, bare 0.25, traced 0.00) code_f 0.50"
        "  |  valid proposals 0.75  |  12.3s"
    )


def test_probe_items_reader_keeps_logged_probes_and_the_last_line_of_a_step(tmp_path):
    problems = {"code_o": probe_subset(2, ["code_o"])["code_o"]}
    s = ProbeScores(["S0"], problems)
    s.correct = {"free": {"S0": {"code_o": [1, 0]}}, "trace": {"S0": {"code_o": [1, 1]}}}
    s.style = {"S0": {"code_o": ["trace", None]}}
    stale = s.items_record(0)
    stale["answers"] = {"free": {"S0": {"code_o": [0, 0]}}}
    lines = [stale, s.items_record(0), s.items_record(5)]  # step 5: cut by a kill before its metrics line
    (tmp_path / "probe_items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    probe = {"S0": {"code_o": 0.5}}
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "time": 0, "mode": "population", "probe": probe}) + "\n"
    )
    run = load_run(tmp_path)
    free = run.probe_items()
    ids = [p.id for p in problems["code_o"]]
    # the fixed probe: no levels
    assert free == [
        {"step": 0, "member": "S0", "task": "code_o", "item": 0, "id": ids[0], "correct": True, "style": "trace",
         "answers": "free", "level": None},
        {"step": 0, "member": "S0", "task": "code_o", "item": 1, "id": ids[1], "correct": False, "style": None,
         "answers": "free", "level": None},
    ]  # fmt: skip
    assert [(r["correct"], r["style"]) for r in run.probe_items("trace")] == [
        (True, "trace"),
        (True, "trace"),
    ]
    assert len(run.probe_items("all")) == 4 and run.probe_items("bare") == []


def test_the_probe_shows_its_progress_and_a_line_on_the_console(tmp_path):
    import io

    from rich.console import Console

    from populora.engine import build
    from populora.engine.testing import random_model
    from populora.train.trainer import Trainer

    buf = io.StringIO()
    model, tok = random_model(seed=0)
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    over = ["train.steps=1", "tasks.prompts=3", "rl.rollouts=1", "tasks.teacher_max_new_tokens=8"]
    over += [
        "tasks.student_max_new_tokens=8",
        "tasks.seed_synthetic=2",
        "sandbox.workers=1",
        "train.threads=1",
    ]
    over += ["diagnostics.probe_every=1", "diagnostics.probe_size=2", "diagnostics.probe_proposals=1"]
    over += ["diagnostics.probe_set=fixed", "diagnostics.probe_styles=true"]  # a two-style probe's lines too
    tr = Trainer(load_config("tiny", over), tmp_path / "run", engine=engine, quiet=False)
    tr.console = Console(file=buf, force_terminal=True, width=300)
    tr.prober.budget = dict.fromkeys(tr.prober.budget, 4)
    tr.setup()
    try:
        tr.fit(0)
    finally:
        tr.close()
    out = buf.getvalue()
    # step 0: the 4 members are the base model, so one answers: 3 tasks x 2 items free; the random model
    # opens with neither style, so both are forced on its 2 code_o items
    assert "probe 0/6 answers" in out and "probe 6/6 answers" in out
    assert "probe, answer style forced 4/4 answers" in out
    assert "probe, teachers' fixed prompts 6/6 proposals" in out
    assert "probe     0/1  students code_i" in out and "probe     1/1  students" in out


def test_members_with_equal_adapters_are_asked_once_and_copied():
    import torch

    from populora.engine import build
    from populora.engine.testing import random_model
    from populora.train.probe import adapter_key, same_adapters

    model, tok = random_model(seed=0)
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    ad = engine.get_adapter(0)
    for _, b in ad.modules.values():
        b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(1)))
    engine.set_adapter(0, ad)
    engine.set_adapter(2, ad)  # slot 2 = slot 0; slots 1 and 3 are fresh (B = 0: the base model)
    assert adapter_key(engine, 1) == adapter_key(engine, 3) == "base" != adapter_key(engine, 0)
    assert same_adapters(engine, {"T0": 0, "T1": 1, "S0": 2, "S1": 3}) == {
        "T0": "T0",
        "T1": "T1",
        "S0": "T0",
        "S1": "T1",
    }
    s = ProbeScores(["T0", "T1"], {"code_o": []})
    s.correct = {"free": {"T0": {"code_o": [1, 0]}, "T1": {"code_o": [0, 0]}}}
    s.style = {"T0": {"code_o": ["trace", "bare"]}}
    s.texts = {("free", "code_o", 0, "T0"): "a"}
    c = s.copied({"T0": "T0", "S0": "T0", "T1": "T1"})
    assert c.members == ["T0", "S0", "T1"]
    assert c.correct["free"] == {"T0": {"code_o": [1, 0]}, "S0": {"code_o": [1, 0]}, "T1": {"code_o": [0, 0]}}
    assert c.style == {"T0": {"code_o": ["trace", "bare"]}, "S0": {"code_o": ["trace", "bare"]}}
    assert c.texts == {("free", "code_o", 0, "T0"): "a", ("free", "code_o", 0, "S0"): "a"}
