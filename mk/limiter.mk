# cgroup v2 IO/CPU limiter agent (limiter/, tests/limiter/, tests/lab/test_limiter_kernel.py).
#   make test-limiter                        unit and property tests on a fake cgroup tree
#   make bench-limiter                       scan cost at 100/1,000/5,000 pods (fake tree)
#   make bench-limiter LIMITER_LAB=lab-node-1  plus the reaction time on a running lab VM
.PHONY: test-limiter bench-limiter

LIMITER_LAB ?=

test-limiter: venv
	$(BIN)/pytest tests/limiter

BENCHES += limiter
bench-limiter: venv
	$(BIN)/python bench/limiter_scan.py $(if $(LIMITER_LAB),--lab $(LIMITER_LAB))
