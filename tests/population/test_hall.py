"""The hall of fame's bookkeeping (population/hall.py) on hand numbers: who is frozen next, which slot each
entry takes and gives up, the checkpoint state, the record's rates and its schema check."""

import pytest

from populora.config import ConfigError, load_config
from populora.population.hall import Hall, best_by_lcb, check_hof, entry_id, rate, side_record


def test_best_by_lcb_picks_the_highest_lower_bound_per_role():
    members = [
        ("T0", "teacher", 30.0, 8.0),  # 30 - 2 * 8 = 14
        ("T1", "teacher", 26.0, 5.0),  # 16: a lower mean but surer
        ("S0", "student", 25.0, 2.0),  # 21
        ("S1", "student", 27.0, 3.0),  # 21: a tie, the smaller id wins
    ]
    assert best_by_lcb(members, k=2.0) == {"teacher": "T1", "student": "S0"}
    assert best_by_lcb(members, k=0.0) == {"teacher": "T0", "student": "S1"}  # mu alone
    assert best_by_lcb([("A0", "single", None, None)], k=1.0) == {"single": "A0"}


def test_slots_fill_each_pool_then_replace_its_oldest_snapshot():
    hall = Hall(size=2, first_slot=4, single=False)  # members hold slots 0-3
    assert hall.n_slots == 5 and hall.pool_slots("teacher") == [5, 6] and hall.pool_slots("student") == [7, 8]
    base = hall.admit_base()
    assert (base.id, base.role, base.slot, base.teaches, base.studies) == ("base", "both", 4, True, True)
    assert hall.admit_base() is base  # once
    t1, gone = hall.admit("T0", "teacher", 3)
    assert (t1.id, t1.slot, gone) == ("s000003-T0", 5, None)
    s1, _ = hall.admit("S1", "student", 3)
    t2, _ = hall.admit("T1", "teacher", 6)
    assert (s1.slot, t2.slot) == (7, 6)
    t3, gone = hall.admit("T0", "teacher", 9)  # the teacher pool is full: the step-3 snapshot leaves
    assert gone is t1 and t3.slot == 5
    assert [e.id for e in hall.teachers] == ["base", "s000006-T1", "s000009-T0"]
    assert [e.id for e in hall.students] == ["base", "s000003-S1"]


def test_single_mode_has_one_pool_playing_both_roles_and_size_zero_keeps_only_the_base():
    hall = Hall(size=1, first_slot=1, single=True)
    hall.admit_base()
    a, _ = hall.admit("A0", "single", 2)
    assert (a.role, a.slot, hall.n_slots) == ("both", 2, 2)
    assert [e.id for e in hall.teachers] == [e.id for e in hall.students] == ["base", "s000002-A0"]
    b, gone = hall.admit("A0", "single", 4)
    assert gone is a and b.slot == 2
    empty = Hall(size=0, first_slot=4, single=False)
    empty.admit_base()
    entry, gone = empty.admit("T0", "teacher", 1)
    assert gone is entry and [e.id for e in empty.entries] == ["base"]


def test_state_round_trips_and_a_foreign_state_is_refused():
    hall = Hall(size=1, first_slot=4, single=False)
    hall.admit_base()
    hall.admit("T0", "teacher", 2)
    hall.entries[0].exam = 3
    again = Hall(size=1, first_slot=4, single=False)
    again.load_state(hall.state_dict())
    assert again.state_dict() == hall.state_dict() and again["base"].exam == 3
    for bad in (
        {"x": 1},  # not a list
        [{"id": "base", "role": "both", "step": 0, "member": None}],  # no slot
        [{"id": "../up", "role": "both", "step": 0, "member": None, "slot": 4}],  # not a folder name
        [{"id": "base", "role": "both", "step": 0, "member": None, "slot": 9}],  # another run's slots
        [{"id": "base", "role": "both", "step": 0, "member": None, "slot": 4}] * 2,  # twice
    ):
        with pytest.raises(ValueError):
            again.load_state(bad)
    assert entry_id(12, "S3") == "s000012-S3"


def test_record_rates_on_hand_numbers_and_its_schema_check():
    assert rate([True, False, False, True]) == 0.5 and rate([]) is None
    rec = side_record([True, True, False], {"base": [True, False, False, False], "s000002-S0": []})
    assert rec == {"valid": 2 / 3, "n": 3, "solve": {"base": 0.25, "s000002-S0": None}}
    hof = {
        "hall": {"base": {"role": "both", "step": 0, "member": None, "exam": 2}},
        "members": {"T0": {"teacher": side_record([True], {"base": [True]})}},
    }
    assert check_hof(hof, "m") == []
    hof["members"]["S0"] = {"student": {"valid": 1.5, "solve": {}}}
    hof["members"]["S1"] = {"student": {"valid": 1.0, "solve": {"s000009-T9": 0.5}}}
    errs = check_hof(hof, "m")
    assert len(errs) == 2 and "S0" in errs[0] and "not in hof.hall" in errs[1]


def test_config_keys_off_by_default_and_their_slots():
    cfg = load_config("tiny")
    assert cfg.hof.every == 0 and cfg.n_slots == 4  # no hall, no extra slot
    assert load_config("tiny", ["hof.every=5"]).n_slots == 4 + 1 + 2 * 2
    assert load_config("tiny", ["hof.every=5", "hof.size=1", "population.mode=single"]).n_slots == 1 + 1 + 1
    with pytest.raises(ConfigError, match="hof.size"):
        load_config("tiny", ["hof.size=-1"])
