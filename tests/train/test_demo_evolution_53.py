"""The tiny demo's evolution and the README's mixed-rank example, shortened, in a real trainer (issue 53, points 3
and 4; bundled tiny model, real sandbox): the 2T+2S preset runs a crossover (X1-X4), and the example's flags move
a member's rank (M6 within lora.rank_range)."""

import re
from pathlib import Path

from fast_runs import FAST as SHARED_FAST

from populora.config import load_config
from populora.diagnostics.sinks import read_jsonl
from populora.train.trainer import Trainer

README = Path(__file__).resolve().parents[2] / "README.md"
FAST = [
    *SHARED_FAST,
    "train.steps=4",
    "train.checkpoint_every=4",
    "evolution.every=1",  # an evolution event after steps 1, 2 and 3
]


def _run(tmp_path, model_name, sets):
    cfg = load_config("tiny", [*FAST, f"model.name={model_name}", *sets])
    tr = Trainer(cfg, tmp_path / "run", quiet=True)
    tr.setup()
    tr.fit()
    ranks = {m.id: tr.engine.get_adapter(m.slot).rank for m in tr.pop.ordered()}
    tr.close()
    events = [e for e in read_jsonl(tmp_path / "run" / "events.jsonl") if e.get("type") == "evolution"]
    return events, ranks


def test_the_tiny_demo_runs_a_crossover(tmp_path, model_name):
    events, _ = _run(tmp_path, model_name, [])
    crossed = [e for e in events if e["planned"].startswith("X")]
    assert crossed, [e["planned"] for e in events]
    # one survivor per role: its second parent is the member it replaced
    assert all(len(e["parents"]) == 2 and e["parents"][1] == e["replaced"] for e in crossed)


def test_the_readme_mixed_rank_example_moves_a_rank(tmp_path, model_name):
    (line,) = [x for x in README.read_text().splitlines() if "M6 moves them" in x]
    example = re.findall(r"--set (\S+)", line.split("#")[0])
    assert "lora.rank_range=[1,16]" in example
    # a seed whose six draws (of nine operators) include M6: the run is deterministic
    events, ranks = _run(tmp_path, model_name, [*example, "train.seed=1"])
    assert any(e["operator"] == "M6" for e in events), [e["operator"] for e in events]
    # children take their first parent's rank (8 or 1); only M6 gives one outside the two
    assert set(ranks.values()) - {1, 8}, ranks
