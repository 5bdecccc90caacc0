"""Synthetic run folders shared by the report tests (written once per session)."""

import pytest

from populora.report.synthetic import write_synthetic_run


@pytest.fixture(scope="session")
def pop_run(tmp_path_factory):
    # a killed population run: 3T+3S, evolution every 6 steps, the last metrics line cut mid-write
    return write_synthetic_run(
        tmp_path_factory.mktemp("runs") / "pop",
        mode="population",
        steps=24,
        evolve_every=6,
        seed=1,
        cut_last_line=True,
    )


@pytest.fixture(scope="session")
def single_run(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("runs") / "single", mode="single", steps=16, seed=2)


@pytest.fixture(scope="session")
def pop_report(pop_run):
    from populora.report import write_report

    return write_report(pop_run)


@pytest.fixture(scope="session")
def single_report(single_run):
    from populora.report import write_report

    return write_report(single_run)
