"""Fixtures for the sandbox tests: one session-wide pool, and one that also pre-imports dangerous modules
(os, socket, subprocess, ctypes, ...) so the attack corpus tests the isolation, not a failed import."""

from __future__ import annotations

import os

import pytest

from populora.sandbox import DEFAULT_PRELOAD, Limits, Sandbox

#: Modules a hostile job gets for free in the attack pool, so the isolation layers are what must stop it.
ATTACK_PRELOAD = DEFAULT_PRELOAD + (
    "os",
    "sys",
    "socket",
    "subprocess",
    "multiprocessing",
    "threading",
    "ctypes",
    "shutil",
    "signal",
    "tempfile",
    "pathlib",
    "gc",
    "builtins",
    "resource",
    "urllib.request",
    "http.client",
    "multiprocessing.popen_fork",
    "encodings.idna",
    "mmap",
)


@pytest.fixture(scope="session")
def sandbox():
    with Sandbox(workers=2, limits=Limits(timeout_s=5, memory_mb=256, max_output_chars=4000)) as sb:
        yield sb


@pytest.fixture(scope="session")
def attack_sandbox():
    with Sandbox(
        workers=2,
        limits=Limits(timeout_s=1.5, memory_mb=256, max_output_chars=4000, tmp_mb=8, file_mb=4),
        preload=ATTACK_PRELOAD,
    ) as sb:
        yield sb


@pytest.fixture
def is_root() -> bool:
    return os.geteuid() == 0


@pytest.fixture(scope="module")
def eval_sandbox():
    """The evaluation profile, where a hostile job also gets the attack pool's modules for free."""
    limits = Limits(timeout_s=10, memory_mb=1024, max_output_chars=4000)  # numpy needs more address space
    with Sandbox(workers=2, limits=limits, preload=ATTACK_PRELOAD, profile="eval") as sb:
        yield sb
