# The embedded lab (scripts/lab, lab_fleet/) and its benchmarks.
#   make bench-lab        cold (empty cache) and warm lab start times
#   make bench-converge   site.yml first run and no-op re-runs: project, project without Mitogen, stock
.PHONY: bench-lab bench-converge

BENCHES += lab converge
bench-lab: deps venv
	$(BIN)/python bench/lab_start.py

bench-converge: deps venv
	$(BIN)/python bench/site_converge.py
