# Model releases (serving/release/README.md): scripts/release_model publish | digest | verify.
#   make release-model ENV=staging   validate, publish to the env's store, record, write the stack file
#   make release-verify              every stack file names a release recorded in model_releases/
#   make test-release-store          publish and verify against a local S3 server (moto, .venv-s3); part
#                                    of the serving-lab gate (make test-serving-lab), runnable alone
.PHONY: release-model release-verify test-release-store

# The Makefile's `ENV ?= prod` default does not count: a release names its environment.
release-model: venv
	$(if $(filter command line environment,$(origin ENV)),,$(error make release-model needs ENV=dev|staging|prod))
	$(BIN)/python scripts/release_model publish --env $(ENV)

release-verify: venv
	$(BIN)/python scripts/release_model verify

# moto's server, from requirements-s3.lock (see the Makefile's venv rules).
.PHONY: .venv-s3/.stamp
.venv-s3/.stamp:
	$(LOCKED_ENVS) ensure .venv-s3

# Not a gate of its own: make test-serving-lab runs these tests with the rest of the serving lab.
test-release-store: venv .venv-s3/.stamp
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -m serving_lab tests/release
