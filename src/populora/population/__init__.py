"""The population: members (ids, roles, lineage), TrueSkill ratings, PFSP matchmaking, the evolution plan.

Pure Python (plus the `trueskill` package); imports no torch, engine or operators, so every rule here is
unit-tested on hand-computed numbers. The trainer (`populora.train`) applies the plans to adapters.
"""

from populora.population.members import Member, Population
from populora.population.ratings import Game, Rating, RatingSystem, score_game

__all__ = ["Game", "Member", "Population", "Rating", "RatingSystem", "score_game"]
