# One entry point per job. Every target creates or reuses .venv and installs what it needs,
# so on a fresh clone `make demo` and `make test` are the only commands a newcomer types.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := tests/interop/node/node_modules/.installed
DOCS_JS_STAMP := tools/docs-assets/node_modules/.installed
BROWSER_JS_STAMP := tests/browser/web/node_modules/.installed

.PHONY: demo test test-loaded test-matrix lint docs bench soak netlab diagram clean venv chromium netlab-tools audio-tools

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Node socket.io 4.8 for the interop tests, installed from the project's own lock of versions.
# Node.js and npm are prerequisites of `make test` (README, docs/testing.md): say so plainly.
$(NODE_STAMP): tests/interop/node/package.json
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "make test needs Node.js (18+) and npm: the interop tests run a real Node socket.io" >&2; \
	  echo "server. Install them (Debian/Ubuntu: sudo apt-get install nodejs npm; or https://nodejs.org)," >&2; \
	  echo "then run make test again." >&2; exit 1; }
	cd tests/interop/node && npm install --no-audit --no-fund --silent
	@touch $(NODE_STAMP)

# socket.io-client for the browser test client's page (tests/browser/web), from its own lock.
$(BROWSER_JS_STAMP): tests/browser/web/package.json tests/browser/web/package-lock.json
	cd tests/browser/web && npm ci --no-audit --no-fund --silent
	@touch $(BROWSER_JS_STAMP)

# The browser scripts the documentation site bundles so that it works offline (Mermaid, the
# search worker's shim), from the project's own lock; tools/docs_offline.py publishes them.
$(DOCS_JS_STAMP): tools/docs-assets/package.json tools/docs-assets/package-lock.json
	cd tools/docs-assets && npm ci --no-audit --no-fund --silent
	@touch $(DOCS_JS_STAMP)

# Debian's Chromium for the browser tests (tests/release/test_docs_offline.py, tests/browser; driven by
# Playwright, which downloads no browser): installed when missing and we are root (CI is),
# else the command to run is printed and the target fails.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "chromium (the docs' browser test): apt-get install -y --no-install-recommends chromium"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  else \
	    echo "make test needs Chromium for the docs' browser test; run:" >&2; \
	    echo "  sudo apt-get install -y --no-install-recommends chromium" >&2; exit 1; \
	  fi; }

# nftables and iproute2 (nft, ip, tc) for the network lab (tests/netlab, which runs as root:
# namespaces, veth pairs, nftables rules), and coturn (turnserver: the lab's TURN relay),
# installed when missing and we are root (CI is),
# else the command to run is printed and the target fails.
netlab-tools:
	@{ command -v nft && command -v ip && command -v tc && command -v turnserver; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "the network lab's tools: apt-get install -y --no-install-recommends nftables iproute2 coturn"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends nftables iproute2 coturn >/dev/null; \
	  else \
	    echo "make test needs nftables, iproute2 and coturn for the network lab (tests/netlab); run:" >&2; \
	    echo "  sudo apt-get install -y --no-install-recommends nftables iproute2 coturn" >&2; exit 1; \
	  fi; }

# PulseAudio and PortAudio for the voice tests (tests/integration/test_voice_loop.py: a private
# PulseAudio server whose speaker the microphone hears through a loopback): installed when
# missing and we are root (CI is); else, unless AVATAR_SDK_AUDIO=off (the tests then skip),
# the command to run is printed and the target fails.
audio-tools:
	@{ command -v pulseaudio && command -v pacat && ldconfig -p | grep -q libportaudio.so.2; } >/dev/null 2>&1 || \
	  [ "$$AVATAR_SDK_AUDIO" = off ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "the voice tests' audio server: apt-get install -y --no-install-recommends pulseaudio pulseaudio-utils libportaudio2 libasound2-plugins"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends pulseaudio pulseaudio-utils libportaudio2 libasound2-plugins >/dev/null; \
	  else \
	    echo "make test needs PulseAudio and PortAudio for the voice tests (or AVATAR_SDK_AUDIO=off); run:" >&2; \
	    echo "  sudo apt-get install -y --no-install-recommends pulseaudio pulseaudio-utils libportaudio2 libasound2-plugins" >&2; exit 1; \
	  fi; }

# The demo needs the SDK alone: its own small venv (about 270 MB; .venv, with every
# development extra for the tests and tools, is about 1.4 GB).
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

$(DEMO_STAMP): pyproject.toml
	@test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install --quiet -e .
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/python -m avatar_sdk._cli demo

# pytest-xdist workers: twice the CPUs this process may use (capped at 16). Most tests wait on
# sockets and timers rather than compute, so more workers than cores shortens the run (2 cores:
# 4 workers); `-n auto` (one per core) would leave them idle while they wait. Override with
# `make test TEST_WORKERS=N`. `--dist loadgroup` keeps the tests marked `xdist_group` on one
# worker each (the Ray tests: two Ray instances starting at once starve a 2-core machine).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n * 2 > 16 ? 16 : n * 2 )))

# The real-time audio loop (PulseAudio, the speaker, the echo canceller) runs first and alone:
# it plays in real time, and the parallel suite's workers starving it underrun the device loop
# (a test, not the SDK, would then fail). Everything else runs in parallel after it.
test: $(STAMP) $(NODE_STAMP) $(DOCS_JS_STAMP) $(BROWSER_JS_STAMP) chromium netlab-tools audio-tools
	$(PY) -m pytest -q -m 'realtime_audio and not slow and not netlab'
	$(PY) -m pytest -q -m 'not slow and not netlab and not realtime_audio' -n $(TEST_WORKERS) --dist loadgroup

# `make test` on a busy machine: one process spinning on every CPU but one (on 2 cores, the
# other core busy) for the whole run, killed when it ends (tools/cpu_hog.py). A test that holds
# only on an idle machine fails here first. `make test-loaded LOAD_HOGS=N` for another load.
LOAD_HOGS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n > 1 ? n - 1 : 1 )))

test-loaded: $(STAMP)
	$(PY) -m tools.cpu_hog --hogs $(LOAD_HOGS) -- $(MAKE) test

# The suite on the other supported interpreters (3.11, the default, is `make test`): one
# .venv-X.Y per version from pythonX.Y (on PATH, else pyenv's), installed like .venv. An extra whose wheels do not
# exist for an interpreter yet is left out there (the install says so); its tests then skip
# with that reason (tests/conftest.py), everything else runs.
MATRIX ?= 3.12 3.13

test-matrix: $(NODE_STAMP) $(DOCS_JS_STAMP) $(BROWSER_JS_STAMP) chromium netlab-tools audio-tools $(foreach v,$(MATRIX),.venv-$(v)/.installed)
	@set -e; for v in $(MATRIX); do \
	  echo "== Python $$v: pytest -m 'not slow and not netlab'"; \
	  .venv-$$v/bin/python -m pytest -q -m 'realtime_audio and not slow and not netlab'; \
	  .venv-$$v/bin/python -m pytest -q -m 'not slow and not netlab and not realtime_audio' -n $(TEST_WORKERS) --dist loadgroup; \
	done

.venv-%/.installed: pyproject.toml
	@test -x .venv-$*/bin/python || { \
	  py=python$*; $$py -c '' 2>/dev/null || py=$$(ls -d $$HOME/.pyenv/versions/$*.*/bin/python$* 2>/dev/null | tail -1); \
	  test -n "$$py" || { echo "no python$* on this machine (PATH, ~/.pyenv/versions)"; exit 1; }; \
	  echo "python$*: $$py"; $$py -m venv .venv-$*; }
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python -m pip install --quiet -e '.[dev]' || { \
	  echo "python$*: '.[dev]' does not install; installing it without the ray extra"; \
	  .venv-$*/bin/python -m pip install --quiet -e '.[dev-core]'; }
	@touch $@

soak: $(STAMP)
	$(PY) -m pytest -q -s -m slow --timeout 900

# The network lab's full matrix (root; ~11 minutes): loss, blackholes, reject, flaps and a rate
# limit against an audio+video session, one scenario at a time (each prints its figures).
netlab: $(STAMP) netlab-tools
	$(PY) -m pytest -q -s -m netlab -p no:xdist tests/netlab --timeout 900

lint: $(STAMP)
	$(PY) -m ruff check avatar_sdk tests benchmarks examples tools
	$(PY) -m ruff format --check avatar_sdk tests benchmarks examples tools
	$(PY) -m mypy

# The documentation site into site/; --strict: a broken link, a page missing from the nav or
# a reference block the code cannot fill fails the build. `python -m` so that the checkout's
# avatar_sdk is the one documented.
docs: $(STAMP) $(DOCS_JS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# Writes benchmarks/results.json, benchmarks/RESULTS.md and benchmarks/recovery-tiers.png.
bench: $(STAMP)
	$(PY) -m benchmarks

diagram: $(STAMP)
	$(PY) -m avatar_sdk._cli diagram

clean:
	rm -rf $(VENV) $(DEMO_VENV) .venv-3.* tests/interop/node/node_modules tools/docs-assets/node_modules tests/browser/web/node_modules site
