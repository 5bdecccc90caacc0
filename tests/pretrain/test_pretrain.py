"""The tiny-model pipeline: program generator, corpus in the task formats, tokenizer, training, the asset."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from populora.pretrain.commands import ASSET_DIR
from populora.pretrain.corpus import build_corpus
from populora.pretrain.programs import compile_program, run, sample_code_f, sample_program, sample_triplet
from populora.pretrain.tasks_render import TasksRenderer
from populora.sandbox import Sandbox
from populora.tasks import Answer, Problem, Proposal, get

MINI = dict(
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=2,
    intermediate_size=64,
    vocab_size=600,
    n_examples=150,
    tokenizer_examples=150,
    val_examples=10,
    seq_len=512,
    batch_size=2,
    steps=3,
    warmup_steps=2,
)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


def test_programs_are_deterministic_for_a_seed_and_their_outputs_reproduce():
    a = [sample_triplet(random.Random(7)) for _ in range(3)]
    b = [sample_triplet(random.Random(7)) for _ in range(3)]
    assert a == b
    rng = random.Random(11)
    triplets = [sample_triplet(rng) for _ in range(50)]
    assert len({t.program for t in triplets}) > 40  # varied, not one template
    for t in triplets:
        assert run(compile_program(t.program), t.input) == t.output
    # Shapes vary at level full: loops, comprehensions, conditionals all appear in a modest sample.
    text = "\n".join(sample_program(rng, level="full").code for _ in range(200))
    for needle in ("for ", "while ", "if ", " for ", "{", "[", "def g("):
        assert needle in text


def test_simple_names_use_the_fixed_name_pools_in_order():
    import ast

    from populora.pretrain.programs import SIMPLE_PARAM_NAMES, SIMPLE_RESULT_NAMES

    allowed = {n for pool in (*SIMPLE_PARAM_NAMES.values(), *SIMPLE_RESULT_NAMES.values()) for n in pool}
    allowed |= {"f", "g", "v", "x", "e", "i", "c", "ch", "w", "k"}  # entry, helper and loop variables
    allowed |= {"len", "sum", "max", "min", "abs", "sorted", "str", "list", "range", "ord", "enumerate"}
    rng = random.Random(4)
    for _ in range(100):
        prog = sample_program(rng, names="simple")
        tree = ast.parse(prog.code)
        assert {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} <= allowed, prog.code
        params = [a.arg for a in tree.body[0].args.args]
        for typ in set(prog.param_types):
            got = [p for p, t in zip(params, prog.param_types, strict=True) if t == typ]
            assert got == SIMPLE_PARAM_NAMES[typ][: len(got)]
    with pytest.raises(ValueError, match="names"):
        sample_program(rng, names="fancy")


def test_corpus_is_deterministic_for_a_seed():
    r = TasksRenderer()
    assert build_corpus(3, 40, r) == build_corpus(3, 40, r)
    assert build_corpus(3, 40, r) != build_corpus(4, 40, r)
    kinds = {e.kind for e in build_corpus(3, 200, r)}
    assert {
        "student:code_i",
        "student:code_o",
        "student:code_f",
        "teacher:code_i",
        "teacher:code_o",
        "teacher:code_f",
    } <= kinds


def test_corpus_completions_parse_with_the_task_parsers():
    for e in build_corpus(5, 120, TasksRenderer()):
        if e.kind == "program":
            continue
        role, name = e.kind.split(":")
        task = get(name)
        parsed = task.parse_answer(e.completion) if role == "student" else task.parse_proposal(e.completion)
        assert isinstance(parsed, Answer if role == "student" else Proposal), (e.kind, parsed, e.completion)


def test_rendered_examples_validate_and_score_in_the_real_sandbox(sandbox):
    """A perfect teacher's proposal validates to the same outputs; a perfect student's answer scores True."""
    r = TasksRenderer()
    rng = random.Random(2)
    for name in ("code_i", "code_o"):
        task = get(name)
        trs = [sample_triplet(rng) for _ in range(6)]
        props = [task.parse_proposal(r.teacher_io(name, trs[:2], t)[1]) for t in trs]
        problems = task.validate(props, sandbox)
        assert [p.outputs for p in problems] == [(t.output,) for t in trs], problems
        for t in trs:
            prompt, answer = r.student_io(name, t)
            assert task.score(r.problem_io(name, t), [task.parse_answer(answer)], sandbox) == [True]
    task = get("code_f")
    prog, pairs = sample_code_f(rng)
    prop = task.parse_proposal(r.teacher_f(prog.code, pairs, prog.message)[1], program=prog.code)
    (problem,) = task.validate([prop], sandbox)
    assert isinstance(problem, Problem), problem
    assert list(problem.outputs) == [o for _, o in pairs]
    _, answer = r.student_f(prog.code, pairs, prog.message)
    assert task.score(problem, [task.parse_answer(answer)], sandbox) == [True]


def _save_with_qwen2_config(tok, folder: Path) -> None:
    from transformers import Qwen2Config

    tok.save_pretrained(folder)
    Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    ).save_pretrained(folder)


def test_tokenizer_round_trips_and_autotokenizer_ids_equal_the_raw_ids(tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from populora.pretrain.tokenizer import train_tokenizer

    corpus = build_corpus(1, 150, TasksRenderer())
    tok = train_tokenizer((e.prompt + e.completion for e in corpus), vocab_size=600)
    _save_with_qwen2_config(tok, tmp_path)
    auto = AutoTokenizer.from_pretrained(tmp_path)
    raw = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert auto.padding_side == "left"
    assert auto.eos_token == "<|endoftext|>" and auto.pad_token == "<|pad|>"
    held_out = [e.prompt + e.completion for e in build_corpus(99, 30, TasksRenderer())]
    held_out += ["x = 12345 + 6789\n", "  ünïcödé 'strings'\n\n\t", "def f(s):\n    return s[::-1]"]
    for text in held_out:
        ids = auto(text, add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(text).ids
        assert auto.decode(ids) == text
    # Qwen's regex splits numbers into single digits.
    assert [auto.decode([i]) for i in auto("12345", add_special_tokens=False)["input_ids"]] == list("12345")


def test_pretrain_tiny_run_writes_a_loadable_and_reproducible_model_folder(tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from populora.pretrain.train import PretrainConfig, pretrain

    info = pretrain(PretrainConfig(seed=1, **MINI), tmp_path / "a", progress=False)
    pretrain(PretrainConfig(seed=1, **MINI), tmp_path / "b", progress=False)
    assert info["steps"] == 3 and info["corpus_examples"] == 150
    assert json.loads((tmp_path / "a" / "pretrain_info.json").read_text())["seed"] == 1
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    tok = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert model.config.model_type == "qwen2" and model.config.tie_word_embeddings
    ids = tok("def f(x):", return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], model.config.vocab_size)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_wall_clock_wsd_run_is_reproduced_by_its_recorded_steps_and_decay_start(tmp_path):
    """On a time budget the step count is only fixed when the decay starts; the recorded `steps` and
    `decay_start` reproduce the run bit for bit."""
    import torch
    from safetensors.torch import load_file

    from populora.pretrain.train import PretrainConfig, pretrain

    base = {**MINI, "steps": None}
    info = pretrain(PretrainConfig(seed=2, minutes=0.04, **base), tmp_path / "a", progress=False)
    steps, decay_start = info["config"]["steps"], info["config"]["decay_start"]
    assert 0 < decay_start < steps and info["config"]["schedule"] == "wsd"
    again = {**MINI, "steps": steps}
    pretrain(PretrainConfig(seed=2, decay_start=decay_start, **again), tmp_path / "b", progress=False)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_max_statements_is_the_generator_difficulty_and_bench_reads_it_from_the_model(tmp_path):
    from populora.pretrain.bench import generator_settings
    from populora.pretrain.programs import MAX_STATEMENTS

    rng = random.Random(0)

    def mean_lines(k: int) -> float:
        return sum(sample_program(rng, max_statements=k).code.count("\n") for _ in range(300)) / 300

    assert mean_lines(1) < mean_lines(2) < mean_lines(4)
    with pytest.raises(ValueError, match="max_statements"):
        sample_program(rng, max_statements=0)
    (tmp_path / "pretrain_info.json").write_text(
        json.dumps({"config": {"names": "simple", "max_statements": 3}})
    )
    assert generator_settings(tmp_path) == {"names": "simple", "max_statements": 3, "level": "full"}
    # Folders written before the knob existed were trained with up to 4 statements.
    (tmp_path / "pretrain_info.json").write_text(json.dumps({"config": {"names": "varied"}}))
    assert generator_settings(tmp_path) == {"names": "varied", "max_statements": 4, "level": "full"}
    assert generator_settings(tmp_path / "none")["max_statements"] == MAX_STATEMENTS
    (tmp_path / "pretrain_info.json").write_text(
        json.dumps({"config": {"names": "simple", "max_statements": 1, "level": "easy"}})
    )
    assert generator_settings(tmp_path)["level"] == "easy"


def test_level_easy_restricts_statement_kinds_depth_and_values():
    import ast

    from populora.pretrain.programs import sample_io

    rng = random.Random(3)
    loops = (ast.For, ast.While, ast.If, ast.IfExp, ast.ListComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)
    easy_lines, full_lines, full_loops = 0, 0, 0
    for _ in range(300):
        prog = sample_program(rng, max_statements=1, level="easy")
        tree = ast.parse(prog.code)
        assert not any(isinstance(node, loops) for node in ast.walk(tree)), prog.code
        fn = tree.body[0]
        assert len(fn.body) == 2 and isinstance(fn.body[-1].value, ast.Name), prog.code  # x = expr; return x
        assert len(fn.args.args) <= 2 and set(prog.param_types) <= {"int", "str", "list"}
        for text, _ in sample_io(rng, prog, 3):
            for value in eval(f"({text},)"):
                assert not isinstance(value, int) or 0 <= value <= 9
                assert not isinstance(value, str | list) or len(value) <= 6
        easy_lines += prog.code.count("\n")
        full = sample_program(rng, max_statements=1, level="full")
        full_lines += full.code.count("\n")
        full_loops += any(isinstance(node, loops) for node in ast.walk(ast.parse(full.code)))
    assert easy_lines < full_lines and full_loops > 30  # the full grammar is unchanged
    with pytest.raises(ValueError, match="level"):
        sample_program(rng, level="hard")


def test_level_reaches_the_corpus_and_the_model_record(tmp_path):
    from populora.pretrain.train import PretrainConfig, pretrain

    info = pretrain(PretrainConfig(seed=0, level="easy", max_statements=1, **MINI), tmp_path, progress=False)
    assert info["config"]["level"] == "easy"
    from populora.pretrain.bench import generator_settings

    assert generator_settings(tmp_path) == {"names": "simple", "max_statements": 1, "level": "easy"}
    ex = build_corpus(0, 60, TasksRenderer(), level="easy", max_statements=1)
    progs = [e.completion for e in ex if e.kind == "program"]
    assert progs and not any("for " in p or "while " in p for p in progs)


def test_parse_mix():
    from populora.pretrain.corpus import parse_mix

    assert parse_mix("student:code_o=3, program=0.5") == {"student:code_o": 3.0, "program": 0.5}
    for bad in ("student:code_x=1", "program", "program=x", "program=-1", "program=0"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_the_bundled_model_is_graded_and_its_runs_draw_from_its_generator():
    """Trainer seeds come from the generator the asset was pretrained on (its graded levels), and the tiny
    presets probe it on the graded probe sets, with one answer style (the asset always traces code_o)."""
    from populora.config import load_config
    from populora.pretrain.bench import generator_settings
    from populora.pretrain.graded import is_graded_level, parse_levels
    from populora.train.setup import graded_seed_levels

    level = generator_settings(ASSET_DIR)["level"]
    assert is_graded_level(level)
    assert graded_seed_levels(ASSET_DIR) == parse_levels(level)
    assert set(parse_levels(level)) == {1, 2, 3, 4, 5}
    info = json.loads((ASSET_DIR / "pretrain_info.json").read_text())
    assert info["config"]["trace"] is True and info["config"].get("trace_fraction", 1.0) == 1.0
    for preset in ("tiny", "tiny-learn"):
        dg = load_config(preset).diagnostics
        assert dg.probe_set == "graded" and dg.probe_styles is False, preset


def test_pretrain_tiny_cli_rejects_bad_arguments():
    from typer.testing import CliRunner

    from populora.cli import app

    res = CliRunner().invoke(app, ["pretrain-tiny", "--steps", "0"])
    assert res.exit_code == 2 and "--steps" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--max-statements", "0"])
    assert res.exit_code == 2 and "--max-statements" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--schedule", "linear"])
    assert res.exit_code == 2 and "--schedule" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "hard"])
    assert res.exit_code == 2 and "--level" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--attention", "causal"])
    assert res.exit_code == 2 and "--attention" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--mix", "student:code_x=1"])
    assert res.exit_code == 2 and "--mix" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--trace", "--trace-fraction", "1.5"])
    assert res.exit_code == 2 and "--trace-fraction" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "0-6"])
    assert res.exit_code == 2 and "--level" in res.output and "bad level" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "1-5", "--trace", "--trace-fraction", "0.5"])
    assert res.exit_code == 2 and "one answer style" in res.output
    res = CliRunner().invoke(app, ["bench", "tiny-model", "--level", "2-1"])
    assert res.exit_code == 2 and "bad level" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "easy", "--student-level", "1"])
    assert res.exit_code == 2 and "--student-level needs graded levels" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "1-5", "--student-level", "7"])
    assert res.exit_code == 2 and "--student-level" in res.output and "bad level" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--trace-names"])
    assert res.exit_code == 2 and "add --trace" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "easy", "--code-f-trace"])
    assert res.exit_code == 2 and "--code-f-trace needs graded levels" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--save-every", "-1"])
    assert res.exit_code == 2 and "--save-every" in res.output


def test_a_checkpoint_is_written_during_training_and_continues_as_a_model_folder(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from populora.pretrain.train import PretrainConfig, pretrain

    # save_every_minutes tiny: a checkpoint after every step; the last one is the model at the step before the end
    info = pretrain(PretrainConfig(seed=4, save_every_minutes=1e-9, **MINI), tmp_path / "run", progress=False)
    ck = tmp_path / "run" / "checkpoint"
    meta = json.loads((ck / "checkpoint.json").read_text())
    assert meta["step"] == info["steps"] and meta["config"]["seed"] == 4
    assert (
        not (tmp_path / "run" / "checkpoint.partial").exists()
        and not (tmp_path / "run" / "checkpoint.old").exists()
    )
    a = AutoModelForCausalLM.from_pretrained(ck)
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "run")
    for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), n  # the last checkpoint is the final model (saved after the last step)
    more = pretrain(PretrainConfig(seed=5, init_from=str(ck), **MINI), tmp_path / "more", progress=False)
    assert more["history"] == [{"checkpoint": meta}]  # the lineage of a continued checkpoint is kept


def test_committed_asset_loads_fits_and_greedy_generates_for_a_compact_prompt():
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    files = {p.name for p in ASSET_DIR.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors",
    } <= files
    assert sum(p.stat().st_size for p in ASSET_DIR.iterdir()) <= 12 * 10**6  # issue 30: at most 12 MB
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(ASSET_DIR).eval()
    tok = AutoTokenizer.from_pretrained(ASSET_DIR)
    task = get("code_o")
    prompt = task.student_prompt(
        Problem(task="code_o", program="def f(x):\n    return x + 1", inputs=("3",), outputs=("4",)),
        template="compact",
    )
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    assert (
        ids["input_ids"][0].tolist()
        == Tokenizer.from_file(str(ASSET_DIR / "tokenizer.json")).encode(prompt).ids
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=16, do_sample=False, pad_token_id=tok.pad_token_id)
    text = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert text.strip()  # the trained asset answers in a fenced block; the bench measures how well
    assert text.lstrip().startswith("```")


def test_packing_restarts_positions_per_example_and_pads_as_one_more_segment():
    from populora.pretrain.train import _pack

    enc = [([5, 6, 7], [0.3, 1.0, 1.0]), ([8, 9], [0.3, 1.0]), ([4, 4, 4, 4], [1.0] * 4)]
    data = _pack(enc, seq_len=6, pad_id=1)
    assert data.ids == [[5, 6, 7, 8, 9, 1], [4, 4, 4, 4, 1, 1]]
    assert data.positions == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    assert data.weights[0] == [0.3, 1.0, 1.0, 0.3, 1.0, 0.0]


@pytest.mark.parametrize("attention", ["example", "row"])
def test_per_example_attention_makes_a_packed_example_score_as_it_does_alone(attention):
    """With attention="example" the loss of an example inside a packed row is its loss alone at position
    0, as the model sees a prompt at inference; with "row" it also sees the example before it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from populora.pretrain.train import _pack, _weighted_loss

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=1,
    )
    model = Qwen2ForCausalLM(cfg).train()
    first, second = [7, 8, 9, 10, 11], [12, 13, 14, 15]
    # The first token of `second` is predicted from `first`'s last one in a packed row: weight 0, as alone.
    data = _pack([(first, [0.0] * 5), (second, [0.0] + [1.0] * 3)], seq_len=9, pad_id=1)
    positions = torch.tensor(data.positions) if attention == "example" else None
    packed, _, _ = _weighted_loss(
        model, torch.tensor(data.ids), torch.tensor(data.weights), positions=positions
    )
    alone, _, _ = _weighted_loss(model, torch.tensor([second]), torch.tensor([[0.0] + [1.0] * 3]))
    assert torch.isclose(packed, alone, atol=1e-5) == (attention == "example")
