"""One real sandbox for the task tests (starting workers costs ~0.1 s each; share it per session)."""

import pytest


@pytest.fixture(scope="session")
def sandbox():
    from populora.sandbox import Limits, Sandbox

    with Sandbox(workers=2, limits=Limits(timeout_s=1, memory_mb=256, max_output_chars=4000)) as sb:
        yield sb
