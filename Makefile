# One entry point per job. Every target creates or reuses .venv and installs what it needs,
# so on a fresh clone `make demo` and `make test` are the only commands a newcomer types.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := tests/interop/node/node_modules/.installed

.PHONY: demo test lint docs bench soak diagram clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Node socket.io 4.8 for the interop tests, installed from the project's own lock of versions.
$(NODE_STAMP): tests/interop/node/package.json
	cd tests/interop/node && npm install --no-audit --no-fund --silent
	@touch $(NODE_STAMP)

demo: $(STAMP)
	$(PY) -m avatar_sdk._cli demo

test: $(STAMP) $(NODE_STAMP)
	$(PY) -m pytest -q -m 'not slow' -n 4

soak: $(STAMP)
	$(PY) -m pytest -q -s -m slow --timeout 900

lint: $(STAMP)
	$(PY) -m ruff check avatar_sdk tests benchmarks examples tools
	$(PY) -m ruff format --check avatar_sdk tests benchmarks examples tools
	$(PY) -m mypy

# The documentation site into site/; --strict: a broken link, a page missing from the nav or
# a reference block the code cannot fill fails the build. `python -m` so that the checkout's
# avatar_sdk is the one documented.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# Writes benchmarks/results.json, benchmarks/RESULTS.md and benchmarks/recovery-tiers.png.
bench: $(STAMP)
	$(PY) -m benchmarks

diagram: $(STAMP)
	$(PY) -m avatar_sdk._cli diagram

clean:
	rm -rf $(VENV) tests/interop/node/node_modules site
