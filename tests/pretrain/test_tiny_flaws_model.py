"""The bundled planted-misconception model (`model.name=tiny-flaws`): a standard model folder pretrained with every
class planted, and on held-out atoms it gives the misconceived reader's answer far more often than asset v2."""

import json

from populora.engine.models import resolve_model
from populora.paths import FLAWS_MODEL_DIR, TINY_MODEL_DIR
from populora.pretrain.flaws import CLASSES


def test_the_name_resolves_to_the_bundled_folder_and_its_record_names_the_classes():
    assert resolve_model("tiny-flaws") == FLAWS_MODEL_DIR
    info = json.loads((FLAWS_MODEL_DIR / "pretrain_info.json").read_text())
    assert info["config"]["flaws"] == list(CLASSES) and info["config"]["flaw_rate"] == 0.6
    assert any(k.startswith("atoms:") for k in info["config"]["mix"])
    assert (FLAWS_MODEL_DIR / "model.safetensors").stat().st_size < 12 * 2**20


def test_it_answers_held_out_atoms_the_misconceived_way_where_asset_v2_does_not():
    from populora.pretrain.bench import generate, load_model
    from populora.pretrain.flaw_probe import answers_wrong
    from populora.pretrain.flaw_probe_sets import flaw_probe_selection
    from populora.pretrain.graded_probe import MAX_NEW_TOKENS
    from populora.pretrain.tasks_render import TEMPLATE
    from populora.tasks import get

    problems, _, wrong = flaw_probe_selection(3, ["code_o"])  # 3 held-out atoms a class: 18 items
    t = get("code_o")
    prompts = [t.student_prompt(p, template=TEMPLATE) for p in problems["code_o"]]
    misread = {}
    for name, folder in (("v2", TINY_MODEL_DIR), ("flaws", FLAWS_MODEL_DIR)):
        lm, tok = load_model(folder, 1)
        answers = generate(lm, tok, prompts, MAX_NEW_TOKENS["code_o"], 0.0, seed=0)
        misread[name] = sum(
            answers_wrong(t.parse_answer(a), w) for a, w in zip(answers, wrong["code_o"], strict=True)
        )
    # measured here: asset v2 1 of 18, the planted model 9 of 18 (greedy; the margin leaves room for other CPUs)
    assert misread["flaws"] >= misread["v2"] + 4, misread
