# Triton model repository (model_repository/) and its validator (model_repo_check/).
#   make validate-models            every check, GPUs assumed available
#   make validate-models ENV=prod   prod's GPUs (KIND_GPU rule) and Triton release (its config schema)
#   make validate-models VALIDATE_FLAGS='--strict --format json'
#   make validate-models-triton     the real tritonserver 2.51 (release 24.10, .venv-triton) loads
#                                   each model on this machine and gives its own verdict
#   make test-models-triton         pytest -m serving_lab tests/model_repository (both engines); part of
#                                   the serving-lab gate (make test-serving-lab), runnable alone
#   make bench-validate             1,000 generated models: rules engine (target < 3 s), triton engine per model
#   make model-schemas              re-vendor each matrix release's model_config_pb2.py (needs PyPI)
# The Makefile's own `ENV ?= prod` default does not count: only an ENV given on the command
# line or in the environment selects a target environment here.
.PHONY: validate-models validate-models-triton test-models-triton example-models model-schemas bench-validate

# The triton engine compiles its stand-in backend (model_repo_check/stand_in_backend/stand_in.c).
APT_PACKAGES += gcc libc6-dev

MODELS_ENV_ARG = $(if $(filter command line environment,$(origin ENV)),--env $(ENV))

validate-models: venv
	$(BIN)/python scripts/validate_model_repo model_repository $(MODELS_ENV_ARG) $(VALIDATE_FLAGS)

# .venv-triton/.stamp is spelled out: TRITON_VENV comes from mk/serving.mk, read after this file.
validate-models-triton: deps venv .venv-triton/.stamp
	$(BIN)/python scripts/validate_model_repo model_repository --engine triton $(VALIDATE_FLAGS)

# Not a gate of its own: make test-serving-lab runs these tests with the rest of the serving lab.
test-models-triton: deps venv .venv-triton/.stamp
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -m serving_lab tests/model_repository

# Rebuild the committed example .onnx files (deterministic: no diff unless the builder changed).
example-models: venv
	$(BIN)/python scripts/build_example_models model_repository

# Re-vendor model_repo_check/schemas/<release>/model_config_pb2.py from the tritonclient wheel of each
# release in platform_matrix/matrix.yml (needs PyPI; see model_repo_check/schemas/README.md).
model-schemas: venv
	$(BIN)/python -m model_repo_check.vendor_schemas

# 1,000 generated models: the rules engine against its 3 s target, the triton engine's time per
# model beside it (on a sample; BENCH_VALIDATE_FLAGS='--triton-sample 0' leaves it out).
BENCHES += validate
bench-validate: deps venv .venv-triton/.stamp
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/validate_models.py $(BENCH_VALIDATE_FLAGS)
