# leasecron: `make demo` and `make test` work on a fresh machine; each installs what it needs.
# The control-plane binaries are built once from the Go module proxy and cached outside the
# repository (see e2e/controlplane/build.sh); the virtual environment lives in .venv.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
SECONDS ?= 60
PYTEST_ARGS ?=
# `make test` runs the unit and integration cases on this many pytest-xdist workers, each with
# its own control plane (most of them wait on ticks, not on the CPU), then the e2e cases in one
# process, alone: they run replicas as processes, the machine's one node, podman and the chaos
# bench, load the machine and check its state. PYTEST_WORKERS=0: the first part in one process.
PYTEST_WORKERS ?= 2
# Both parts run; either failing fails the target. pytest's exit code 5 is "no case selected"
# (PYTEST_ARGS naming cases of one part only).
PYTEST_PARTS = failed=0; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) -m "not e2e" $(1) || [ $$? -eq 5 ] || failed=1; \
	$(BIN)/pytest -m e2e $(1) || [ $$? -eq 5 ] || failed=1; \
	exit $$failed
IMAGE ?= leasecron/operator:dev
LOCK_ARGS ?=
PYTHON_IMAGE ?=
# mypy's cache outside the repository too, so a fresh clone checks in a second, not 25
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/leasecron/mypy

.PHONY: all venv controlplane node stores lint test unit integration demo bench clean lock image image-smoke actionlint docs docs-check

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "[make] installing leasecron and its dev extras into $(VENV)"
	@# uv resolves and installs from its cache (outside the repository) in seconds; pip is the fallback
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv \
	  && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]' \
	  || $(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

controlplane:
	@bash e2e/controlplane/build.sh >/dev/null
	@bash e2e/toxiproxy/build.sh >/dev/null

# The real node of the end-to-end tests (kubelet, kube-scheduler, kube-proxy, containerd and
# its shim, ctr, the pause image), built once from the Go module proxy and cached outside the
# repository beside the control plane (e2e/node/build.sh; it waits for the control plane's
# build, whose Go build cache it reuses).
# Host packages it needs (runc, podman, iptables, ...) are installed when missing and this is a
# root shell with apt-get (e2e/node/host-packages.sh).
node:
	@bash e2e/node/host-packages.sh
	@bash e2e/controlplane/build.sh >/dev/null
	@bash e2e/node/build.sh >/dev/null

# PostgreSQL and redis-server for the store tests (leasecron.fencing): Debian packages,
# installed when missing and this is a root shell with apt-get (e2e/stores/host-packages.sh).
stores:
	@bash e2e/stores/host-packages.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

test: venv controlplane node stores
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	@bash e2e/tools/actionlint.sh
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -q
	$(call PYTEST_PARTS,$(PYTEST_ARGS))
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: venv controlplane node stores
	$(call PYTEST_PARTS,tests/integration e2e $(PYTEST_ARGS))

demo: venv controlplane
	$(BIN)/leasecron demo --seconds $(SECONDS)

bench: venv controlplane
	$(BIN)/leasecron bench handover --json
	$(BIN)/leasecron bench failover --json
	$(BIN)/leasecron bench ticks --replicas 5 --jobs 1 --ticks 200 --json
	$(BIN)/leasecron bench ticks --through runtime --replicas 5 --jobs 1 --ticks 50 --json
	$(BIN)/leasecron bench ticks --through runtime --replicas 5 --jobs 1000 --ticks 1 --compare-cronjob --json
	$(BIN)/leasecron bench ticks --through runtime --replicas 5 --jobs 10000 --ticks 1 --json
	$(BIN)/leasecron bench operator --jobs 1000 --json
	$(BIN)/leasecron bench guards --replicas 5 --ticks 30 --json
	$(BIN)/leasecron bench requests --replicas 3 --requests 20 --json

# The image's dependency lock (hashes, every platform); LOCK_ARGS=--upgrade moves the pins. The
# fencing extra is in it for the example app (its ledger writes through leasecron.fencing).
lock: venv
	$(BIN)/uv pip compile pyproject.toml --extra operator --extra fencing --universal --python-version 3.11 \
	  --generate-hashes --custom-compile-command "make lock" -q $(LOCK_ARGS) -o requirements/image.txt
	$(BIN)/uv pip compile requirements/build.in --universal --python-version 3.11 \
	  --generate-hashes --custom-compile-command "make lock" -q $(LOCK_ARGS) -o requirements/build.txt

# The operator image with docker or podman; PYTHON_IMAGE=... picks the base image.
image:
	@PYTHON_IMAGE=$(PYTHON_IMAGE) bash e2e/containers/build-image.sh $(IMAGE)

# The built image run as the chart runs it, against the local control plane.
image-smoke: venv controlplane
	LEASECRON_IMAGE=$(IMAGE) $(BIN)/pytest e2e/test_image_smoke.py e2e/test_image_example_app.py $(PYTEST_ARGS)

# GitHub Actions workflows (actionlint is built once from the Go module proxy and cached).
actionlint:
	@bash e2e/tools/actionlint.sh

# The documentation site (mkdocs.yml, pages in docs/) into site/; `make test` builds it with
# --strict, so a broken link or an API name that no longer exists fails.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build -q

# The site served on 127.0.0.1 and looked at in headless Chromium (Debian's chromium and
# chromium-driver, installed when missing): home page, search, an API page; screenshots in
# site/_check/.
docs-check: docs
	@bash e2e/docs/chromium.sh
	$(BIN)/python e2e/docs/docs_check.py site

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache build site *.egg-info operator/*.egg-info
