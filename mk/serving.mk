# The serving lab (lab_fleet/serving.py, scripts/serve-lab): a real tritonserver on the CPU,
# Prometheus with the project's rules and Alertmanager with its routes, on loopback ports.
#   make serve-lab            up; prints the URLs (state, logs and data under .lab/serving)
#   make serve-lab-status     what runs, where, and whether it answers
#   make serve-lab-down       stops every process that `up` started
#   make test-serving-lab     the serving-lab gate: every serving_lab test (tests/serving_lab,
#                             tests/model_repository, tests/release) in one pytest run on two
#                             xdist workers (the schedule: tests/serving_lab/conftest.py)
# Needs the Debian packages prometheus, prometheus-alertmanager, libb64-0d (perf_analyzer),
# python3-venv and libpython3.11 (the Python backend's stub links it), from `make deps`.
.PHONY: serve-lab serve-lab-down serve-lab-status test-serving-lab

TRITON_VENV := .venv-triton
# Debian's Python: the wheel's backend stub links the system libpython3.X (package libpython3.11).
TRITON_PYTHON ?= /usr/bin/python3
SERVE_LAB := $(BIN)/python scripts/serve-lab

# The lab's own venv, every pin from platform_matrix/matrix.yml (serving_lab), locked in
# requirements-triton.lock and requirements-triton-no-deps.lock (the Triton wheel, installed
# without its dependencies: PyTriton's Python side is not used); see the Makefile's venv rules.
.PHONY: $(TRITON_VENV)/.stamp
$(TRITON_VENV)/.stamp: | deps $(VENV)/.stamp
	$(LOCKED_ENVS) ensure $(TRITON_VENV) --python $(TRITON_PYTHON)

serve-lab: deps venv $(TRITON_VENV)/.stamp
	$(SERVE_LAB) up

serve-lab-down: venv
	$(SERVE_LAB) down

serve-lab-status: venv
	$(SERVE_LAB) status

# One pytest run for the tests that share .venv: moto's S3 server (tests/release) runs as a
# process from .venv-s3, whose botocore pins python-dateutil<3 against kubernetes' >=3 in .venv.
# Two workers (2 cores): the modules that only wait run beside the serial unit; SERVING_LAB_WORKERS=0
# runs everything in this process, one module after another.
SERVING_LAB_WORKERS ?= 2
TEST_TARGETS += test-serving-lab
test-serving-lab: deps venv $(TRITON_VENV)/.stamp .venv-s3/.stamp
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -m serving_lab -n $(SERVING_LAB_WORKERS) --dist loadgroup \
	  tests/serving_lab tests/model_repository tests/release tests/pulumi/test_own_cluster_page.py
