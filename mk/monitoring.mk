# Monitoring as code (monitoring/, see monitoring/README.md).
#   make monitoring        write monitoring/generated/ from monitoring/*.py (commit the result)
#   make test-monitoring   generated files current, promtool check/test rules, amtool check-config
#                          and route tests (python -m monitoring check); tests/monitoring runs in
#                          make test-offline, with the other offline tests
.PHONY: monitoring test-monitoring

monitoring: venv
	$(BIN)/python -m monitoring build

TEST_TARGETS += test-monitoring
test-monitoring: deps venv
	$(BIN)/python -m monitoring check
