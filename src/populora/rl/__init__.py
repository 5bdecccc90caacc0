"""RL maths: REINFORCE++-baseline advantages (`advantages`), the token-level policy loss (`loss`) and the
learning-rate schedule (`schedule`).

Pure functions (torch for the first two, plain Python for the schedule), no model or engine imports.
"""
