"""The overrides that keep a tiny-model training run to seconds (few prompts, n=2, short answers, one thread):
one list for every test that trains, so a change to what "fast" means is made once."""

FAST = [
    "tasks.prompts=3",
    "rl.rollouts=2",
    "tasks.teacher_max_new_tokens=48",
    "tasks.student_max_new_tokens=24",
    "sandbox.workers=1",
    "train.threads=1",
    "tasks.references=1",
    "tasks.seed_synthetic=2",
]
