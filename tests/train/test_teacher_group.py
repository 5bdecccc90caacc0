"""`rl.teacher_group`: each teacher prompt sampled m times, its proposals sharing one per-prompt baseline.

Real engine (a tiny random model), hand-made traces for the advantages; the real propose phase for the layout.
"""

import pytest
import torch
from test_fidelity import _gen, _trainer

from populora.config import ConfigError, load_config
from populora.rl.advantages import reinforce_pp_baseline
from populora.train.records import ProposalTrace


def _proposals(rewards: list[float]) -> list[ProposalTrace]:
    """Teacher rows only (no valid problem, so no student rows), rewards set by hand."""
    out = []
    for i, r in enumerate(rewards):
        tr = ProposalTrace("T0", "S0", "code_o", gen=_gen(0, 4 + i, i))
        tr.reward = r
        out.append(tr)
    return out


def test_proposals_of_one_prompt_share_a_baseline(tmp_path):
    rewards = [1.0, 0.0, -1.0, -1.0]  # two prompts of two proposals: means 0.5 and -1
    lengths = [4, 5, 6, 7]
    grouped = _trainer(tmp_path, "g2", ["rl.teacher_group=2"], n_slots=4).build_rows(_proposals(rewards))
    expected = reinforce_pp_baseline(
        torch.tensor(rewards), torch.tensor(lengths), [0, 0, 1, 1], ["batch"] * 4
    ).tolist()
    assert [r.advantages for r in grouped] == pytest.approx(expected, rel=1e-6)
    # by hand: centred [0.5, -0.5, 0, 0]; the second prompt, all invalid, carries no signal
    assert grouped[2].advantages == grouped[3].advantages
    ungrouped = _trainer(tmp_path, "g1", [], n_slots=4).build_rows(_proposals(rewards))
    assert ungrouped[3].advantages < grouped[3].advantages  # a group of one keeps its -1


def test_each_prompt_is_sampled_teacher_group_times(tmp_path):
    tr = _trainer(tmp_path, "run", ["rl.teacher_group=2", "tasks.prompts=3"], n_slots=4)
    tr.setup()
    try:
        traces = tr.propose([("T0", "S0")], step=1)
    finally:
        tr.close()
    assert [t.task for t in traces] == ["code_i", "code_i", "code_o", "code_o", "code_f", "code_f"]
    # the two proposals of a prompt share its prompt (and code_f its shown program), not their samples
    for a, b in zip(traces[::2], traces[1::2], strict=True):
        assert a.gen.prompt_ids == b.gen.prompt_ids and a.shown_program == b.shown_program
    assert traces[0].gen.prompt_ids != traces[2].gen.prompt_ids


def test_teacher_group_must_be_positive():
    with pytest.raises(ConfigError, match="rl.teacher_group"):
        load_config("tiny", ["rl.teacher_group=0"])
