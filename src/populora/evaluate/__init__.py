"""Held-out evaluation: benchmark loaders, prompts, generation, graders and the results table.

Owns `populora eval` (see `commands.py`). Layout:

- `data.py`      benchmark registry and loaders (EvalPlus jsonl.gz, AZR-format math jsonl, LiveCodeBench jsonl);
                 the data root defaults to the copy shipped in `populora.data`
- `prompts.py`   the AZR evaluation prompts and a plain chat prompt
- `extract.py`   answer extraction: AZR `<answer>` / last `\\boxed{}`, code blocks, EvalPlus-style sanitising
- `math_grader.py`  math-verify grading with timeouts in worker processes
- `code_grader.py`  EvalPlus and LiveCodeBench grading in `populora.sandbox.Sandbox` (the evaluation profile)
- `ground_truth.py` EvalPlus expected outputs: the canonical program alone in its job, in a pool of its own,
                 cached
- `pools.py`     the evaluation's sandbox pools: one single-worker `Sandbox` per job uid (own thread allowance)
- `_harness.py`  the candidate-side EvalPlus code (runs inside the job; returns outputs, never compares)
- `evalplus_grading.py`, `evalplus_compare.py`  phases and evalplus's comparison rules, in this process
- `agreement.py`, `bench_speed.py`  the check against the official evalplus 0.3.1 (`populora bench eval`)
- `generate.py`  greedy batched generation: PEFT-merged HF model, engine slot, or vLLM
- `targets.py`   TARGET resolution (run folder or PEFT folder) and member selection
- `oracle.py`    gold / deliberately wrong answers for grader self-checks
- `runner.py`    orchestration: generate (samples saved as they come), grade, collect rows
- `table.py`     JSON + Markdown results table like the paper's (per role: mean, best, best/worst adapter)

It imports `populora.sandbox` and (for the slot path) `populora.engine`; nothing imports it except the CLI.
Heavy libraries (torch, transformers, peft, math_verify) are imported inside functions.
"""

from populora.evaluate.data import BENCHMARKS, CODE_BENCHMARKS, MATH_BENCHMARKS, Item, load_benchmark

__all__ = ["BENCHMARKS", "CODE_BENCHMARKS", "MATH_BENCHMARKS", "Item", "load_benchmark"]
