"""Every row of the two AZR seed files loads and is validated; the numbers are reported in
docs/tasks.md (the sandbox re-runs each input twice: ~5,600 jobs)."""

import pytest

from populora.tasks.buffers import TaskBuffers
from populora.tasks.seeds import load_azr_seed, read_azr_seed

# Why rows fail (reason prefixes); anything else is a regression in the validator or the sandbox.
KNOWN = (
    "forbidden import",
    "output is not plain data",
    "output too long",
    "empty message",
    "message contains the code",
    "message too long",
    "Call is not allowed",
    "BinOp is not allowed",
    "Lambda is not allowed",
    "ListComp is not allowed",
    # output depends on the hash seed (list(set_of_str)): the determinism check's second pass runs with
    # another seed (issue 13, item 4)
    "nondeterministic",
    # a name that is neither bound nor an allowed builtin (`random.randint` in a branch never taken)
    "forbidden name",
)


@pytest.fixture(scope="module")
def reports(shared_data, sandbox):
    d = shared_data / "azr_seed"
    return {
        "io": load_azr_seed(d / "7b_coder_seed_io.jsonl", sandbox, "code_o"),
        "f": load_azr_seed(d / "7b_coder_code_f_seed_io.jsonl", sandbox, "code_f"),
    }


def test_every_row_is_accounted_for(reports):
    for key, rep in reports.items():
        assert rep.total == 256
        assert len(rep.problems) + len(rep.invalid) == rep.total
        for line, reason in rep.invalid:
            assert any(k in reason for k in KNOWN), (key, line, reason)
    # measured 2026-12-01: 244/256 and 217/256 valid (see the docs for the reasons)
    assert len(reports["io"].problems) >= 240 and len(reports["f"].problems) >= 210


def test_seeds_fill_buffers(shared_data, sandbox, reports, tmp_path):
    d = shared_data / "azr_seed"
    rows = read_azr_seed(d / "7b_coder_seed_io.jsonl", "code_o")
    assert rows[0][0].program == "def f(a):\n    return a"
    assert all(p.proposer == "azr_seed" and p.step == 0 for p in reports["io"].problems)
    assert all(len(p.inputs) in (6, 10) for p in reports["f"].problems)
    # seeded() on the first rows of each file (the full files are validated above)
    io, cf = tmp_path / "io.jsonl", tmp_path / "f.jsonl"
    io.write_text("\n".join((d / "7b_coder_seed_io.jsonl").read_text().splitlines()[:12]) + "\n")
    cf.write_text("\n".join((d / "7b_coder_code_f_seed_io.jsonl").read_text().splitlines()[:3]) + "\n")
    b = TaskBuffers.seeded(seed_io=io, seed_code_f=cf, sandbox=sandbox)
    # row 1 is the identity triplet, the same id as the built-in seed, so it is not added twice
    assert b.sizes() == {"code_i": 12, "code_o": 12, "code_f": 3}
    assert {p.task for p in b["code_i"]} == {"code_i"}
    with pytest.raises(ValueError, match="Sandbox"):
        TaskBuffers.seeded(seed_io=io)


def test_features_of_every_valid_seed_program(reports):
    from populora.diagnostics.features import program_features

    for rep in reports.values():
        for p in rep.problems:
            f = program_features(p.program)
            assert f["ast_depth"] >= 4 and f["cyclomatic"] >= 1 and f["loc"] >= 2 and f["n_vars"] >= 1
