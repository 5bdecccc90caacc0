"""Real sandboxes for the task tests, shared per session (starting a worker costs ~0.1-0.5 s).

`sandbox` has a generous wall-clock limit so that seed programs never time out on a loaded 2-core machine;
`quick_sandbox` has a short one for the tests whose programs loop forever on purpose."""

import pytest


@pytest.fixture(scope="session")
def sandbox():
    from populora.sandbox import Limits, Sandbox

    with Sandbox(workers=2, limits=Limits(timeout_s=5, memory_mb=256, max_output_chars=4000)) as sb:
        yield sb


@pytest.fixture(scope="session")
def quick_sandbox():
    from populora.sandbox import Limits, Sandbox

    with Sandbox(workers=1, limits=Limits(timeout_s=0.5, memory_mb=256, max_output_chars=4000)) as sb:
        yield sb
