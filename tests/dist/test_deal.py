"""How rows and requests are split over workers: every slot spread evenly, totals balanced, seeds distinct."""

import random
from collections import Counter

import pytest

from populora.engine.dist import deal, worker_seed


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_every_slot_and_the_total_are_spread_within_one(workers):
    slots = [0] * 7 + [1] * 2 + [2] * 13 + [3]
    sizes = [(i * 37) % 23 + 1 for i in range(len(slots))]
    shares = deal(sizes, slots, workers)
    assert sorted(i for s in shares for i in s) == list(range(len(slots)))  # a partition
    assert all(s == sorted(s) for s in shares)  # each share keeps request order
    totals = [len(s) for s in shares]
    assert max(totals) - min(totals) <= 1
    for slot in set(slots):
        per = [Counter(slots[i] for i in s)[slot] for s in shares]
        assert max(per) - min(per) <= 1, (slot, per)


def test_the_spread_holds_on_random_batches():
    rng = random.Random(0)
    for _ in range(500):
        workers, n, n_slots = rng.randint(2, 8), rng.randint(0, 40), rng.randint(1, 6)
        slots = [rng.randrange(n_slots) for _ in range(n)]
        shares = deal([rng.randint(1, 100) for _ in range(n)], slots, workers)
        totals = [len(s) for s in shares]
        assert max(totals) - min(totals) <= 1
        for slot in set(slots):
            per = [Counter(slots[i] for i in s)[slot] for s in shares]
            assert max(per) - min(per) <= 1


def test_sizes_are_balanced_within_a_slot():
    # one slot, lengths 1..8 over 2 workers: largest-first to the lighter worker gives 18 / 18
    shares = deal(list(range(1, 9)), [0] * 8, 2)
    assert [sum(i + 1 for i in s) for s in shares] == [18, 18]


def test_more_workers_than_items_leaves_some_idle():
    shares = deal([5, 5], [0, 1], 4)
    assert sorted(len(s) for s in shares) == [0, 0, 1, 1]


def test_worker_seeds_differ_by_rank_and_by_seed():
    seeds = {worker_seed(s, r) for s in range(5) for r in range(8)}
    assert len(seeds) == 40
    assert all(0 <= x < 2**63 for x in seeds)
    assert worker_seed(3, 1) == worker_seed(3, 1)
