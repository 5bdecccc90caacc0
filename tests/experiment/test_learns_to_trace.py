"""RL on the bundled model teaches a choice that transfers to held-out problems: write the trace on code_o.

The bundled asset was pretrained with half its code_o answers traced and half bare (docs/tiny-model.md, run 6):
greedy it answers bare, while sampled answers trace about a third of the time and are right more often when
they do. One student adapter, trained with the real update (`populora.experiment.controls.rl_step`: rollouts at
temperature 0.6, sandbox rewards, REINFORCE++-baseline advantages, AdamW on rank-4 LoRA) on new code_o generator
problems every step, must start writing the trace greedily on the fixed *probe* problems it never trained on;
with every advantage negated it must not. This is `tiny-learn`'s result (docs/learning.md) in a minute.
"""

import pytest

from populora.config import load_config
from populora.engine import GenRequest
from populora.experiment.controls import rl_step
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.pretrain.trace import TRACE_LANG
from populora.tasks import get
from populora.train.probe import probe_subset
from populora.train.setup import build_engine, synthetic_seeds

STEPS, PER_STEP, ROLLOUTS = 12, 8, 4


@pytest.fixture(scope="module")
def pool(sandbox):
    seeds = synthetic_seeds(STEPS * PER_STEP, sandbox, seed=4321)  # per task type; the train split only
    return [p for p in seeds if p.task == "code_o"]


def trace_share(engine, problems) -> float:
    task = get("code_o")
    reqs = [
        GenRequest(
            slot=0,
            prompt=task.student_prompt(p, template="compact"),
            max_new_tokens=MAX_NEW_TOKENS["code_o"],
            temperature=0.0,
        )
        for p in problems
    ]
    return sum(f"```{TRACE_LANG}" in g.text for g in engine.generate(reqs, seed=0)) / len(problems)


def _train(model_name, pool, sandbox, sign: float) -> tuple[float, float]:
    cfg = load_config(
        "tiny-learn",
        ["population.teachers=1", "population.students=1", f"model.name={model_name}", "train.threads=2"],
    )
    eng = build_engine(cfg)
    probe = probe_subset(32, ["code_o"])["code_o"]
    try:
        before = trace_share(eng, probe)
        for step in range(STEPS):
            batch = pool[step * PER_STEP : (step + 1) * PER_STEP]  # each problem once
            rl_step(eng, batch, ROLLOUTS, cfg.rl.temperature, step, sandbox, sign=sign)
        return before, trace_share(eng, probe)
    finally:
        eng.close()


def test_rl_teaches_the_trace_on_held_out_problems_and_its_negation_does_not(model_name, pool, sandbox):
    if model_name != "tiny":
        pytest.skip("needs the bundled model (a random model has no trace to choose)")
    assert len(pool) >= STEPS * PER_STEP
    before, after = _train(model_name, pool, sandbox, sign=1.0)
    assert before < 0.1, before  # greedy answers start bare
    assert after > before + 0.25, (before, after)  # measured here: 0.0 -> 1.0 of 32 probe answers
    _, negated = _train(model_name, pool, sandbox, sign=-1.0)
    assert negated < before + 0.1, (before, negated)  # measured here: 0.0 -> 0.0
