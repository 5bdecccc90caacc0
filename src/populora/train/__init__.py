"""The self-play trainer: the paper's five phases per step, the single-agent AZR baseline, checkpoints/resume.

    populora train [--preset tiny] [--run-dir DIR] [--set key=value ...]
    populora train --resume DIR

Modules: `trainer` (the loop: the step, top to bottom), one module per phase of the step (`match`, `propose`,
`validate`, `solve`, `score`, `update`, `rate`, `evolve`) and `save_restore` (checkpoints, resume), `records`
(one `ProposalTrace` per proposal, the metrics.jsonl and problems.jsonl records), `progress` (the console),
`checkpoint` (atomic checkpoints), `run_folder` (config.yaml and the JSONL logs), `commands` (`train`, `demo`,
`bench population`), `bench` (population vs single wall-clock). Imports `population`, `rl`, `tasks`,
`engine`, `operators`, `diagnostics`, `sandbox`; nothing imports `train` (docs/architecture.md).
"""
