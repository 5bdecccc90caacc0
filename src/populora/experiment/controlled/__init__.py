"""The controlled experiments behind docs/learning.md, one `populora experiment control NAME` each.

They were bench scripts (bench/learning_*.py); their recorded results stay in bench/results/ as history.

- gold.py         `control gold`: can one adapter learn the gold answers it is given? (the update checked
                  without self-play; per learning rate)
- rl.py           `control rl`: RL of one student without teachers (does it fit the same problems? does it
                  transfer from new ones?), on experiment/controls.py
- teacher.py      `control teacher`: one teacher rewarded for validity alone, against no update and a negated
                  update, on experiment/teacher_controls.py
- trace_share.py  `control trace-share RUN...`: what a run's students learned on code_o (the share of greedy
                  answers that write the execution trace first, and the accuracy of traced and bare answers)

Each module has `main(argv)` (its own options, `--help`) and writes one JSON file (`--out`). The shuffled
reward control is not here: it runs inside the trainer (`rl.student_rewards=shuffled`) and is asked for with
`populora experiment learning --control shuffled` or the `shuffled` arm of `experiment ablation`.
"""

CONTROLS = {
    "gold": "populora.experiment.controlled.gold",
    "rl": "populora.experiment.controlled.rl",
    "teacher": "populora.experiment.controlled.teacher",
    "trace-share": "populora.experiment.controlled.trace_share",
}
