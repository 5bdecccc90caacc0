"""Seeded random training rows for engine tests: prompts and responses of varied lengths over the given slots."""

import torch

from populora.engine import TrainRow


def random_rows(slots, seed: int = 0) -> list[TrainRow]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k, s in enumerate(slots):
        p = torch.randint(0, 256, (3 + k % 4,), generator=g).tolist()
        r = torch.randint(0, 256, (2 + (k * 3) % 5,), generator=g).tolist()
        rows.append(
            TrainRow(slot=s, prompt_ids=p, response_ids=r, advantages=float(torch.randn((), generator=g)))
        )
    return rows
