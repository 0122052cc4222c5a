# The serving stack in pulumi/ (see pulumi/README.md).
#   make render ENV=prod     write deploy/serving/prod/ from pulumi/Pulumi.prod.yaml
#   make render-all          dev, staging and prod (commit the result: a test checks for drift)
#   make test-policy         the policy pack's unit tests, in .venv-policy
.PHONY: render render-all test-policy

PULUMI_ENVS := dev staging prod

render: venv
	PYTHONPATH=$(CURDIR):$(CURDIR)/pulumi $(BIN)/python -m gpu_serving.render --env $(ENV) --out deploy/serving/$(ENV)

render-all:
	@for env in $(PULUMI_ENVS); do $(MAKE) --no-print-directory render ENV=$$env; done

TEST_TARGETS += test-policy
test-policy: .venv-policy/.stamp
	.venv-policy/bin/pytest -p no:cacheprovider -c /dev/null --rootdir=pulumi/policy pulumi/policy/tests
