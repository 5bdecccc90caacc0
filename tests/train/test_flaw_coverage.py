"""Which planted classes the teachers' valid proposals carry (train/flaw_coverage.py): candidates from syntax
only, the misread program run in the real sandbox, never in this process."""

import pytest

from populora.pretrain.flaws import misread_source, run_misread
from populora.sandbox import Sandbox
from populora.tasks import Problem
from populora.train.flaw_coverage import candidate_classes, carried_classes, coverage_counts


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


def problem(task, program, given, out):
    return Problem(task=task, program=program, inputs=(given,), outputs=(out,))


def test_the_sandbox_reads_each_class_as_the_in_process_misreading(sandbox):
    ranged = "def f(n, s):\n    return list(range(n)), s[:2], n % 3"
    assert candidate_classes(ranged) == ("range_end_inclusive", "slice_end_inclusive", "mod_as_quotient")
    cases = [
        problem("code_o", ranged, "2, 'abc'", "([0, 1], 'ab', 2)"),  # all three change it (2 // 3 is 0)
        problem(
            "code_i", ranged, "0, 'a'", "([], 'a', 0)"
        ),  # range(0) -> [0]; 'a'[:3] is 'a'; 0 % 3 == 0 // 3
        problem("code_f", ranged, "2, 'abc'", "([0, 1], 'ab', 2)"),  # another type: not read
        problem("code_o", "def f(x):\n    return x + 1", "3", "4"),  # no candidate: no job
    ]
    got = carried_classes(cases, sandbox)
    assert got == [
        ("range_end_inclusive", "slice_end_inclusive", "mod_as_quotient"),
        ("range_end_inclusive",),
        (),
        (),
    ]
    # the same verdicts as the generator's in-process reader (which runs only our own programs)
    for c in ("range_end_inclusive", "slice_end_inclusive", "mod_as_quotient"):
        assert (run_misread(ranged, "2, 'abc'", (c,)) != "([0, 1], 'ab', 2)") == (c in got[0])
    assert "__flaw_range = _flaw_range" in misread_source(ranged, ["range_end_inclusive"])


def test_a_hostile_program_is_read_in_the_sandbox_and_counts_as_not_carrying(sandbox):
    import os

    marker = f"/tmp/populora-coverage-{os.getpid()}"
    hostile = f"def f(n):\n    open({marker!r}, 'w').write('x')\n    return list(range(n))"
    got = carried_classes([problem("code_o", hostile, "2", "[0, 1]")], sandbox)
    assert got[0] in ((), ("range_end_inclusive",))  # whatever the sandbox lets the job do, it did there
    assert not os.path.exists(marker)  # nothing ran in this process or reached its file system
    spin = "def f(n):\n    while True:\n        pass\n    return list(range(n))"
    assert carried_classes([problem("code_o", spin, "2", "[0, 1]")], sandbox, deadline_s=2.0) == [()]


def test_counts_keep_every_class():
    class T:
        def __init__(self, flaws):
            self.flaws = flaws

    counts = coverage_counts([T(("mod_as_quotient",)), T(("mod_as_quotient", "range_end_inclusive")), T(())])
    assert counts["mod_as_quotient"] == 2 and counts["range_end_inclusive"] == 1
    assert counts["sorted_reverse_ignored"] == 0 and len(counts) == 6
