"""RL maths: REINFORCE++-baseline advantages (`advantages`) and the token-level policy loss (`loss`).

Pure torch functions, no model or engine imports.
"""
