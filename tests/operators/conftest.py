"""Fixtures for the operator tests (helpers live in op_fixtures.py)."""

import pytest
from op_fixtures import make_adapter

from populora.lora import LoRAAdapter


@pytest.fixture
def p1() -> LoRAAdapter:
    return make_adapter(1)


@pytest.fixture
def p2() -> LoRAAdapter:
    return make_adapter(2)
