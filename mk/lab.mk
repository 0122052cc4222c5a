# The embedded lab (scripts/lab, lab_fleet/) and its benchmarks.
#   make bench-lab        cold (empty cache) and warm lab start times
#   make bench-converge   site.yml first run and no-op re-runs: project, project without Mitogen, stock
#   make bench-converge CONVERGE_INVENTORY=inventories/lab/hosts.yml   only the no-op re-runs, on a converged running node
.PHONY: bench-lab bench-converge

CONVERGE_INVENTORY ?=

BENCHES += lab converge
bench-lab: deps venv
	$(BIN)/python bench/lab_start.py

bench-converge: deps venv
	$(BIN)/python bench/site_converge.py $(if $(CONVERGE_INVENTORY),--inventory $(CONVERGE_INVENTORY))
