# Triton model repository (model_repository/) and its validator (model_repo_check/).
#   make validate-models            every check, GPUs assumed available
#   make validate-models ENV=prod   plus the KIND_GPU rule of pulumi/Pulumi.prod.yaml
#   make validate-models VALIDATE_FLAGS='--strict --format json'
# The Makefile's own `ENV ?= prod` default does not count: only an ENV given on the command
# line or in the environment selects a target environment here.
.PHONY: validate-models example-models bench-validate

MODELS_ENV_ARG = $(if $(filter command line environment,$(origin ENV)),--env $(ENV))

validate-models: venv
	$(BIN)/python scripts/validate_model_repo model_repository $(MODELS_ENV_ARG) $(VALIDATE_FLAGS)

# Rebuild the committed example .onnx files (deterministic: no diff unless the builder changed).
example-models: venv
	$(BIN)/python scripts/build_example_models model_repository

BENCHES += validate
bench-validate: venv
	$(BIN)/python bench/validate_models.py
