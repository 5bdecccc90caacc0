"""Fixtures of the experiment tests: the sandbox the RL controls score answers in."""

import pytest

from populora.sandbox import Limits, Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=Limits(timeout_s=2.0, memory_mb=256)) as sb:
        yield sb
