"""Population members: ids, roles, ratings, lineage and the member -> engine slot map.

Ids follow docs/run-folder.md: teachers `T0, T1, ...`, students `S0, S1, ...`, the single agent `A0`; a child
takes the next never-used number of its role (`T4` replaces `T1`), so an id always names one adapter lineage
entry. A member keeps its engine slot for life; a child takes over the slot of the member it replaces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from populora.population.ratings import Rating

ROLE_PREFIX = {"teacher": "T", "student": "S", "single": "A"}


@dataclass
class Member:
    id: str
    role: str  # "teacher" | "student" | "single"
    slot: int
    mu: float
    sigma: float
    parents: list[str] = field(default_factory=list)
    born_step: int = 0
    operator: str | None = None
    games: int = 0

    @property
    def rating(self) -> Rating:
        return Rating(self.mu, self.sigma)

    def set_rating(self, r: Rating) -> None:
        self.mu, self.sigma = r.mu, r.sigma


@dataclass
class Population:
    """All live members plus the id counters; serialised into checkpoints/state.json."""

    members: dict[str, Member] = field(default_factory=dict)
    next_index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def create(cls, n_teachers: int, n_students: int, prior: Rating, single: bool = False) -> Population:
        pop = cls()
        if single:
            pop.add("single", slot=0, rating=prior)
            return pop
        for i in range(n_teachers):
            pop.add("teacher", slot=i, rating=prior)
        for i in range(n_students):
            pop.add("student", slot=n_teachers + i, rating=prior)
        return pop

    def new_id(self, role: str) -> str:
        prefix = ROLE_PREFIX[role]
        i = self.next_index.get(prefix, 0)
        self.next_index[prefix] = i + 1
        return f"{prefix}{i}"

    def add(
        self,
        role: str,
        slot: int,
        rating: Rating,
        parents: list[str] | None = None,
        born_step: int = 0,
        operator: str | None = None,
    ) -> Member:
        m = Member(
            self.new_id(role), role, slot, rating.mu, rating.sigma, list(parents or []), born_step, operator
        )
        self.members[m.id] = m
        return m

    def replace(self, old_id: str, rating: Rating, parents: list[str], step: int, operator: str) -> Member:
        """Retire `old_id`; its slot goes to a new child member of the same role."""
        old = self.members.pop(old_id)
        return self.add(old.role, old.slot, rating, parents, step, operator)

    def by_role(self, role: str) -> list[Member]:
        return sorted((m for m in self.members.values() if m.role == role), key=lambda m: m.slot)

    @property
    def teachers(self) -> list[Member]:
        return self.by_role("teacher")

    @property
    def students(self) -> list[Member]:
        return self.by_role("student")

    def __getitem__(self, member_id: str) -> Member:
        return self.members[member_id]

    def ordered(self) -> list[Member]:
        return sorted(self.members.values(), key=lambda m: m.slot)

    def to_dict(self) -> dict:
        return {"members": [asdict(m) for m in self.ordered()], "next_index": dict(self.next_index)}

    @classmethod
    def from_dict(cls, data: dict) -> Population:
        pop = cls(next_index=dict(data["next_index"]))
        for m in data["members"]:
            pop.members[m["id"]] = Member(**m)
        return pop
