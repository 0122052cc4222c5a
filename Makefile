# The two commands that matter: `make lab` (the main job on the embedded lab) and
# `make test` (every gate). Both install what they need on a fresh Debian machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LAB := $(BIN)/python scripts/lab
LAB_NODES ?= 1
ENV ?= prod
PLAYBOOKS := $(wildcard playbooks/*.yml)
APT_PACKAGES := qemu-system-x86 qemu-utils debootstrap e2fsprogs openssh-client \
	prometheus prometheus-alertmanager libb64-0d python3-venv libpython3.11 \
	podman runc
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.SECONDEXPANSION:
.PHONY: help deps venv envs lint check test test-gates test-offline test-lab lab lab-down compliance report bench

help:
	@echo "make lab        tools + lab VM + playbooks/site.yml + compliance report + serving lab (Triton, Prometheus, Alertmanager)"
	@echo "make test       every gate: ruff, yamllint, ansible-lint, syntax-check, offline and lab tests"
	@echo "make check      the inner loop: lint and the offline tests (a few minutes)"
	@echo "make lab-down   stop the serving lab and the lab VMs (scripts/serve-lab down, scripts/lab down)"
	@echo "make bench      every benchmark (bench-lab, bench-converge, ...)"

# Debian packages: only what is missing, so a prepared machine does not touch apt.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Each venv (and the npm tree of mk/pulumi.mk) is installed from its hashed lock into
# ${XDG_CACHE_HOME:-~/.cache}/gpu-serving-envs, once per lock and Python, and linked into the
# clone (locked_envs/): with unchanged locks a fresh clone installs nothing. Each target checks
# its lock first: a requirements file changed without `make lock` fails, naming the file. The
# targets keep their stamp names (docs and messages give them); they always run (about 0.1 s).
LOCKED_ENVS := $(PYTHON) -m locked_envs
.PHONY: lock $(VENV)/.stamp .venv-checkov/.stamp .venv-policy/.stamp

# Compile every lock anew (uv pip compile --generate-hashes; needs the package index).
lock:
	$(LOCKED_ENVS) lock

$(VENV)/.stamp:
	$(LOCKED_ENVS) ensure $(VENV)
venv: $(VENV)/.stamp

.venv-checkov/.stamp:
	$(LOCKED_ENVS) ensure .venv-checkov

.venv-policy/.stamp:
	$(LOCKED_ENVS) ensure .venv-policy

# Every tool and environment a gate needs (mk/<area>.mk define the rules of the later ones).
envs: deps venv .venv-checkov/.stamp .venv-policy/.stamp .venv-s3/.stamp .venv-triton/.stamp \
	.cache/argo-rollouts-schema/.stamp .cache/containerd/.stamp

lint: venv
	$(LOCKED_ENVS) check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PYTHONPATH=$(CURDIR):$(CURDIR)/pulumi $(BIN)/python -m gpu_serving.ownership check
	$(BIN)/yamllint --strict .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint --profile production
	@for p in $(PLAYBOOKS); do \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-playbook -i inventories/prod --syntax-check $$p >/dev/null \
	    || { echo "syntax-check failed: $$p"; exit 1; }; echo "syntax ok: $$p"; done

# promtool, amtool, gcc and containerd come from deps: without them the offline tests would skip.
# Two xdist workers, a test file each at a time (its module fixtures built once); OFFLINE_WORKERS=0
# runs them in this process.
OFFLINE_WORKERS ?= 2
test-offline: deps venv .venv-checkov/.stamp .cache/argo-rollouts-schema/.stamp
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -m "not lab and not serving_lab" -n $(OFFLINE_WORKERS) --dist loadfile

# Two xdist workers, a test file (one VM) each at a time: once the converged image exists, two VMs
# run at once (tests/lab/conftest.py: one worker produces the image, the other judges the same runs).
LAB_WORKERS ?= 2
test-lab: deps venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -m lab -n $(LAB_WORKERS) --dist loadfile tests/lab

# `make test` runs each gate as `make GATE` through tests/gates.py: all of them, failures included,
# each with its JUnit report and log under reports/, then a one-screen summary (wall time per gate,
# passed/failed/skipped, every skip with its reason, the slowest tests). The first gate, envs,
# installs every tool and environment, so that no later gate's time is an install's.
# Areas add gates that need their own venv to TEST_TARGETS in mk/<area>.mk. The VM lab runs in a
# second lane beside the other gates once the environments exist, at nice 10, so that the proofs
# that measure time get the CPU first; LANES=1 runs every gate one after another.
GATES = envs lint test-offline $(TEST_TARGETS)
LANES ?= 2
test:
	$(PYTHON) -m tests.gates run $(GATES) $(if $(filter 2,$(LANES)),--beside) test-lab

# The inner loop: lint and the offline tests, with the same summary.
check:
	$(PYTHON) -m tests.gates run envs lint test-offline

# The plain make graph of every gate (no reports): `make -k test-gates`.
test-gates: lint test-offline $$(TEST_TARGETS) test-lab

# The node part (VM, site.yml, compliance report), then the serving lab (mk/serving.mk).
lab: deps venv
	$(LAB) up --nodes $(LAB_NODES)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-playbook -i inventories/lab playbooks/site.yml
	$(MAKE) --no-print-directory compliance INVENTORY=inventories/lab
	$(MAKE) --no-print-directory serve-lab

INVENTORY ?= inventories/lab
compliance: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m tests.compliance.run --inventory $(INVENTORY)

lab-down: venv
	$(SERVE_LAB) down
	$(LAB) down

# Each area adds its targets, and its benchmark to BENCHES, in mk/<area>.mk.
BENCHES :=
TEST_TARGETS :=
-include mk/*.mk

bench: $(patsubst %,bench-%,$(BENCHES))
