"""Does a planted model hold its misreadings on the programs it was trained on, apart from new ones?

Reads the misconception probe (`populora.pretrain.flaw_probe`) on items drawn from the graded generator's train
split, the split its corpus draws from, beside the usual held-out (probe split) reading of `populora bench
tiny-model --flaws`. Prints one line per class and writes the result as JSON.

    python bench/flaws_train_split.py MODEL_DIR [PER_CLASS] [OUT.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from populora.pretrain.flaw_probe import score_flaw_probe


def main(argv: list[str]) -> None:
    model = Path(argv[0])
    per_class = int(argv[1]) if len(argv) > 1 else 12
    out = Path(argv[2]) if len(argv) > 2 else Path("flaws_train_split.json")
    result = score_flaw_probe(
        model, per_class=per_class, threads=1, tasks=("code_o",), split="train", kind="graded"
    )
    out.write_text(json.dumps(result, indent=1) + "\n")
    for flaw, row in result["tasks"]["code_o"].items():
        print(flaw, {k: round(v, 2) for k, v in row.items()})


if __name__ == "__main__":
    main(sys.argv[1:])
