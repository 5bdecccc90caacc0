"""Issue 13, item 4: the determinism check's two passes run in different processes, with different hash seeds
and address-space layouts, so output that depends on the process is caught (both passes used to land on
forks of the same worker, with the same layout and hash seed 0)."""

import pytest

from populora import tasks as T
from populora.tasks.types import InvalidProblem


@pytest.mark.parametrize(
    "program",
    [
        # The example (`id(object()) % 1000`), with a prime modulus: addresses are 16-byte aligned, so
        # `% 1000` leaves about 125 values; two worker layouts kept the value in 14 of 790 fresh sandboxes (CI
        # saw it), against 0 of 790 with 1000003.
        "def f(x):\n    return id(object()) % 1000003 + x",
        "def f(x):\n    return [id(x) % 1000003, x]",
        "def f(x):\n    return hash(str(x))",  # str hashes follow the hash seed
        # Set order of str. Thirty strings, not five: five could keep their order under another hash seed
        # by chance (CI once saw that); thirty keep it with odds far below one in a billion.
        "def f(x):\n    return list({'w' + str(i) for i in range(30)} | {str(x)})",
    ],
)
def test_process_dependent_output_is_rejected(sandbox, program):
    t = T.get("code_o")
    with pytest.raises(InvalidProblem, match="nondeterministic"):
        t.problem_from(sandbox, program=program, inputs=["1"])


def test_urandom_through_a_module_is_rejected(sandbox):
    # With the allow-list off, a program reaching os.urandom is stopped by the determinism check itself.
    from populora.tasks.policy import CapabilityPolicy

    t = T.get("code_o", policy=CapabilityPolicy(deny_modules=frozenset(), allow_modules=None))
    with pytest.raises(InvalidProblem, match="nondeterministic"):
        t.problem_from(sandbox, program="import os\ndef f(x):\n    return os.urandom(4).hex()", inputs=["1"])


def test_deterministic_programs_still_pass(sandbox):
    t = T.get("code_o")
    p = t.problem_from(
        sandbox, program="def f(x):\n    return sorted({'b', 'a', str(x)}), hash(x), {'k': x}", inputs=["3"]
    )
    assert p.outputs == ("(['3', 'a', 'b'], 3, {'k': 3})",)
