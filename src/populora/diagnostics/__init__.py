"""Diagnostics: metric sinks (JSONL, TensorBoard, W&B, MLflow), problem complexity, CVT coverage, and the
derived training-dynamics measures over a run folder (solve-rate oscillation, rating trajectories,
matchup matrix, operator usage, child recovery).

Imports only numpy/scipy (torch only inside `MetricLogger(tensorboard=True)`); it never imports
`train`, so the trainer can depend on it.
"""
