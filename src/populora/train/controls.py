"""The shuffled-reward control (`rl.student_rewards=shuffled`): the null for "the students learn from the reward".

A run with the students' rewards permuted within each step does everything a real run does (the same proposals,
the same rollouts' count, the same number of updates, the same reward multiset, so the same advantage scale) but
the reward no longer says which answer was right. What such a run still gains on the probe is what perturbation
alone gives (e.g. an answer-style flip); the real run's gain minus the shuffled one's is the part that follows the
reward (docs/learning.md). Only the update reads the permuted values (`ProposalTrace.train_rewards`): the teachers'
1 - rho, the ratings and the logged rewards keep the real ones, so the game is the real game.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from populora.train.records import ProposalTrace


def shuffle_student_rewards(traces: Sequence[ProposalTrace], rng: random.Random) -> None:
    """Set every trace's `train_rewards` to a permutation of the step's student answer rewards.

    The permutation runs across all answers of all traces of the step (every student, every problem), so an
    answer's training reward is another answer's real reward; `answer_rewards` are left as they are. The AZR
    single agent's estimation rollouts (`estimate`) are never trained on, so they are left out of the draw."""
    trained = [t for t in traces if not t.estimate]
    flat = [r for t in trained for r in t.answer_rewards]
    rng.shuffle(flat)
    i = 0
    for t in trained:
        n = len(t.answer_rewards)
        t.train_rewards = flat[i : i + n]
        i += n


__all__ = ["shuffle_student_rewards"]
