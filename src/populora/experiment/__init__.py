"""The paper's experiments at laptop scale, one command each (`populora experiment ...`).

- ablation.py: the compute-matched population-size ablation (single, 1T+1S, 2T+2S, 4T+4S, the shuffled
  controls) over seeds;
- retention.py: the crossover retention test (two single-task specialists, every crossover's child probed at
  birth and after recovery);
- learning.py: does a preset learn (seeds, `--control shuffled`); contrasts.py: the arms' probe changes and
  differences with intervals, from stats.py (bootstrap over seeds and probe items) on probe_data.py's arrays;
- controls.py / teacher_controls.py: RL of one student without teachers, one teacher on validity alone; the
  commands that run them and the older controls: controlled/ (`populora experiment control NAME`);
- runs.py: resumable runs, one or `--jobs` at a time, with progress (progress.py: steps done, time left);
  settings.py: an experiment's settings (`--resume OUT`); run_records.py: the raw per-step records of a run;
  measures.py: the per-run numbers (from populora.diagnostics) and confidence intervals; claims.py: the
  paper's claims (a-f) with intervals, controls and verdicts (`populora experiment claims OUT`); evaluation.py:
  `--eval` through `populora eval`; page.py: experiment.html.

This package sits on top of the trainer, like the CLI: it is the only package besides `cli` that imports
`populora.train`.
"""
