"""model.vllm_seeded (issue 51): per-request seeds only when reproducibility is asked for. vLLM 0.32 samples a
request that carries a seed with its own generator, one request at a time in Python; unseeded requests are
sampled together on the device. These run without vLLM: the requests' sampling arguments are built by a pure
method (`VLLMEngine.sampling_kwargs`, what `SamplingParams` receives), and the run's wiring is read at `build`.
The vLLM lane (`.venv-vllm`) runs the engine itself: its seeded tests build the engine with the default
`seeded=True`."""

from __future__ import annotations

import pytest

import populora.train.setup as setup
from populora.config import RESUMABLE_KEYS, ModelConfig, field_docs, load_config
from populora.engine.dist import worker_build_kwargs
from populora.engine.hf import HFEngine
from populora.engine.testing import random_model
from populora.engine.types import GenRequest
from populora.engine.vllm import VLLMEngine


@pytest.fixture(scope="module")
def engine():
    model, tok = random_model(seed=0)
    eng = VLLMEngine.__new__(VLLMEngine)  # the request builder alone: no vLLM started
    eng.hf = HFEngine(model, tok, n_slots=2, rank=4, alpha=8.0, seed=0)
    return eng


REQUESTS = [GenRequest(slot=i % 2, prompt="def f(x):", max_new_tokens=8, temperature=1.0) for i in range(4)]


def test_requests_carry_no_seed_unless_asked(engine):
    engine.seeded = False
    plain = engine.sampling_kwargs(REQUESTS, [0, 1, 2, 3], base_seed=7)
    assert [kw["seed"] for kw in plain] == [None] * 4
    engine.seeded = True
    seeded = engine.sampling_kwargs(REQUESTS, [0, 1, 2, 3], base_seed=7)
    seeds = [kw["seed"] for kw in seeded]
    assert len(set(seeds)) == 4 and all(isinstance(s, int) and 0 <= s < 2**31 - 1 for s in seeds)
    assert seeds == [kw["seed"] for kw in engine.sampling_kwargs(REQUESTS, [0, 1, 2, 3], base_seed=7)]
    for a, b in zip(plain, seeded, strict=True):  # nothing else changes
        assert {k: v for k, v in a.items() if k != "seed"} == {k: v for k, v in b.items() if k != "seed"}


def test_the_run_key_is_off_by_default_and_says_why(monkeypatch, tmp_path):
    assert ModelConfig().vllm_seeded is False
    assert "model.vllm_seeded" in RESUMABLE_KEYS  # which samples are drawn, not how they are distributed
    doc = field_docs()["model.vllm_seeded"]
    assert "one at a time" in doc and "20-35%" in doc
    seen: dict = {}

    def build(**kwargs):  # the engine's arguments (vLLM itself is not installed in this environment)
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(setup, "build", build)
    for value in (False, True):
        cfg = load_config("tiny", [f"model.vllm_seeded={str(value).lower()}", "model.backend=vllm"])
        with pytest.raises(RuntimeError, match="stop here"):
            setup.build_engine(cfg)
        assert seen["seeded"] is value


def test_each_dist_worker_gets_its_own_vllm_generator():
    """Unseeded requests draw from each worker's vLLM generator: equal ones would give two workers the same
    samples for the same prompt. The adapters' seed stays the same everywhere (identical initial adapters)."""
    kw = {"backend": "vllm", "seed": 5, "device": "cuda"}
    got = [worker_build_kwargs(kw, rank) for rank in range(4)]
    assert len({g["vllm_seed"] for g in got}) == 4 and all(0 <= g["vllm_seed"] < 2**31 - 1 for g in got)
    assert all(g["seed"] == 5 for g in got) and "vllm_seed" not in kw
    assert got[1]["vllm_seed"] == worker_build_kwargs(kw, 1)["vllm_seed"]  # reproducible
    assert "vllm_seed" not in worker_build_kwargs({"backend": "hf", "seed": 5}, 1)  # the hf engine has none
