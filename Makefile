# minirl: every command creates .venv and installs what it needs on first use.
#
#   make demo    the flagship run: SFT warm start, then GRPO on the tiny task; prints and plots the curve
#   make test    the whole test suite, grading solutions/ (what CI runs)
#   make book    build the site with `mkdocs build --strict` into site/
#   make serve   serve the site at http://127.0.0.1:8000
#   make lab     open the chapters in JupyterLab
#   make grade   grade YOUR exercises/ and print a progress table (make grade EX=4.1: one exercise, all its checks;
#                make grade EX=7: every exercise of Chapter 7)
#   make parity  compare minirl with verl 0.9.1 itself (its own venv, .venv-verl; part of make test)
#   make parity-trl  compare minirl's DPO and reward-model losses with TRL's trainers (.venv-trl; part of make test)
#   make bench   benchmarks: core ops vs verl, learning speed per estimator, step time with micro-batches
#                and 1 vs 2 processes, legacy vs v1 sync vs colocate_async, minirl vs TRL, RLHF step costs (minutes)
#
# On a GPU machine, choose the torch build, e.g.
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"

PYTHON     ?= python3
export NO_MKDOCS_2_WARNING := 1
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
INSTALLED  := $(VENV)/.installed
RAY_INSTALLED := $(VENV)/.ray-installed
LORA_INSTALLED := $(VENV)/.lora-installed
VERL_VENV  ?= .venv-verl
VERL_PY    := $(VERL_VENV)/bin/python
VERL_INSTALLED := $(VERL_VENV)/.installed
TRL_VENV   ?= .venv-trl
TRL_PY     := $(TRL_VENV)/bin/python
TRL_INSTALLED := $(TRL_VENV)/.installed
MATHJAX    := build/mathjax/node_modules/mathjax/es5/tex-svg.js

.PHONY: install demo test parity parity-trl bench book serve lab grade clean

install: $(INSTALLED) $(MATHJAX)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

# Ray is an optional extra: only Chapter 10 and its tests use it (trainer.use_ray); make test and make lab add it.
$(RAY_INSTALLED): $(INSTALLED)
	$(PY) -m pip install --quiet -e ".[dev,ray]"
	touch $@

# PEFT is an optional extra too: only LoRA (Chapter 14, actor_rollout_ref.model.lora_rank > 0) uses it.
$(LORA_INSTALLED): $(INSTALLED)
	$(PY) -m pip install --quiet -e ".[dev,lora]"
	touch $@

# The book's math renderer, from the npm registry (served by the site itself; see minirl/book/mkdocs_hooks.py).
$(MATHJAX):
	@command -v npm >/dev/null || { echo "ERROR: npm (Node.js) is needed to install MathJax for the book site."; exit 1; }
	npm install --no-audit --no-fund --silent --prefix build/mathjax mathjax@3.2.2

# verl's pins must not touch the book's environment, so verl lives in a venv of its own.
$(VERL_INSTALLED): tests/parity/requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install --quiet $(TORCH_SPEC)
	$(VERL_PY) -m pip install --quiet -r tests/parity/requirements.txt && \
	$(VERL_PY) -m pip install --quiet --no-deps verl==0.9.1 -e . || \
	{ echo "ERROR: could not install verl 0.9.1 for the parity tests (see pip's message above)."; exit 1; }
	touch $@

# The same for TRL: the DPO and reward-model parity tests run against the pinned TRL in a venv of its own.
$(TRL_INSTALLED): tests/parity_trl/requirements.txt pyproject.toml
	$(PYTHON) -m venv $(TRL_VENV)
	$(TRL_PY) -m pip install --quiet $(TORCH_SPEC)
	$(TRL_PY) -m pip install --quiet -r tests/parity_trl/requirements.txt && \
	$(TRL_PY) -m pip install --quiet --no-deps -e . || \
	{ echo "ERROR: could not install TRL for the parity tests (see pip's message above)."; exit 1; }
	touch $@

# The demo's learning rate is twice the default: at 1e-4 one of 15 (warm-start seed x run seed) runs gained only
# +0.08 in 60 steps; at 2e-4 all 15 gain +0.115 to +0.305 on a Xeon, +0.130 to +0.225 on an AMD EPYC
# (bench/demo_grid.py, README "Two commands").
demo: install
	$(PY) -m minirl train trainer.default_local_dir=runs/demo trainer.experiment_name=demo \
		trainer.total_training_steps=60 trainer.test_freq=10 trainer.resume_mode=disable \
		actor_rollout_ref.actor.optim.lr=2e-4
	$(PY) -m minirl plot runs/demo

test: install $(RAY_INSTALLED) $(LORA_INSTALLED) $(VERL_INSTALLED) $(TRL_INSTALLED)
	$(PY) -m ruff check .
	# Every cached warm start and the preference task, built once before the parallel workers need them: tiny (most
	# chapters), chain and chain-zero (Chapters 5 and 8), word (Lab A), tool (Chapter 13), teacher (Chapter 14), the
	# preference task (Chapters 3 and 6). Two builder processes, one per core (each target has its own lock), the
	# two longest builds (word, tool: about 5 and 8 minutes alone) in one: on a fresh clone about half the time of
	# one process; with a full cache a few seconds.
	$(PY) -m minirl warm-start word tool > /dev/null & builder=$$!; \
	$(PY) -m minirl warm-start chain teacher chain-zero tiny > /dev/null && $(PY) -m minirl preference-data > /dev/null; \
	status=$$?; wait $$builder && exit $$status
	$(PY) -m pytest -n 2 --dist loadgroup --durations=25 --target solutions --ignore=tests/parity --ignore=tests/parity_trl
	$(VERL_PY) -m pytest tests/parity
	$(TRL_PY) -m pytest tests/parity_trl

parity: $(VERL_INSTALLED)
	$(VERL_PY) -m pytest tests/parity

parity-trl: $(TRL_INSTALLED)
	$(TRL_PY) -m pytest tests/parity_trl

bench: install $(VERL_INSTALLED)
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	$(VERL_PY) bench/core_ops.py
	$(PY) bench/learning.py
	$(PY) bench/parallel.py
	$(PY) bench/v1_modes.py
	$(PY) bench/book_times.py
	$(PY) bench/vs_trl.py
	$(PY) bench/rlhf.py

book: install
	$(PY) -m mkdocs build --strict

serve: install
	$(PY) -m mkdocs serve

lab: install $(RAY_INSTALLED) $(LORA_INSTALLED)
	$(VENV)/bin/jupyter lab chapters/

grade: install
	@$(PY) -m pytest tests/exercises -q --tb=no -rN -p no:cacheprovider --target exercises \
		$(if $(EX),--exercise $(EX)) || true

clean:
	rm -rf $(VENV) $(VERL_VENV) $(TRL_VENV) site build .pytest_cache
