# The serving stack in pulumi/ (see pulumi/README.md).
#   make render ENV=prod     write deploy/serving/prod/ from pulumi/Pulumi.prod.yaml
#   make render-all          every stack file's environment (commit the result: a test checks for drift)
#   make test-policy         the policy pack's unit tests, in .venv-policy
#   make rollouts-schema     Argo Rollouts' schemas (npm, tests/pulumi/argo-rollouts) for tests/pulumi
#   make new-environment NAME=edge FROM=prod
#                            pulumi/Pulumi.edge.yaml and inventories/edge/, with placeholders to fill
.PHONY: render render-all test-policy rollouts-schema new-environment

# Every stack file's environment, the examples and any made by new-environment.
PULUMI_ENVS := $(patsubst pulumi/Pulumi.%.yaml,%,$(wildcard pulumi/Pulumi.*.yaml))

render: venv
	PYTHONPATH=$(CURDIR):$(CURDIR)/pulumi $(BIN)/python -m gpu_serving.render --env $(ENV) --out deploy/serving/$(ENV)

render-all:
	@for env in $(PULUMI_ENVS); do $(MAKE) --no-print-directory render ENV=$$env || exit 1; done

new-environment: venv
	@test -n "$(NAME)" && test -n "$(FROM)" || { echo "usage: make new-environment NAME=<env> FROM=<stack>" >&2; exit 2; }
	$(BIN)/python scripts/new-environment $(NAME) --from $(FROM)

TEST_TARGETS += test-policy
test-policy: .venv-policy/.stamp
	.venv-policy/bin/pytest -p no:cacheprovider -c /dev/null --rootdir=pulumi/policy pulumi/policy/tests

# @kubernetes-models/argo-rollouts (generated from argo-rollouts v1.9.0, the pinned chart's
# controller) at the lock file's versions, with the validator script beside its node_modules
# (ES modules resolve packages from the script's own folder): `npm ci` of
# tests/pulumi/argo-rollouts into the cache of the Makefile's venv rules, keyed by its three
# files and node's version, and linked at .cache/argo-rollouts-schema.
ROLLOUTS_SCHEMA := .cache/argo-rollouts-schema
.PHONY: $(ROLLOUTS_SCHEMA)/.stamp
rollouts-schema: $(ROLLOUTS_SCHEMA)/.stamp
$(ROLLOUTS_SCHEMA)/.stamp:
	$(LOCKED_ENVS) ensure $(ROLLOUTS_SCHEMA)
