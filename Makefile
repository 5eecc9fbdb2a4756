# minirl: every command creates .venv and installs what it needs on first use.
#
#   make demo    the main job (today: build the book site; once the RL engine lands: a training run)
#   make test    the whole test suite, grading solutions/ (what CI runs)
#   make book    build the site with `mkdocs build --strict` into site/
#   make serve   serve the site at http://127.0.0.1:8000
#   make lab     open the chapters in JupyterLab
#   make grade   grade YOUR exercises/ and print a progress table
#
# On a GPU machine, choose the torch build, e.g.
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"

PYTHON     ?= python3
export NO_MKDOCS_2_WARNING := 1
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
INSTALLED  := $(VENV)/.installed

.PHONY: install demo test book serve lab grade clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

demo: book
	@echo
	@echo "The book is built in site/. Read it with: make serve  (then open http://127.0.0.1:8000)"

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest --target solutions

book: install
	$(PY) -m mkdocs build --strict

serve: install
	$(PY) -m mkdocs serve

lab: install
	$(VENV)/bin/jupyter lab chapters/

grade: install
	@$(PY) -m pytest tests/exercises -q --tb=no -rN -p no:cacheprovider --target exercises || true

clean:
	rm -rf $(VENV) site build .pytest_cache
