# serving.gateway (serving/gateway, see serving/gateway/README.md).
#   make bench-gateway   the same closed-loop load direct to Triton over gRPC and through the
#                        gateway, interleaved, on the real tritonserver: added P50/P95, throughput
#                        ratio; target <= 2 ms added P95 where direct Triton meets its SLO
# Its tests: tests/unit/test_gateway_*.py (make test-offline), tests/serving_lab/test_gateway.py
# (make test-serving-lab).
.PHONY: bench-gateway

BENCHES += gateway
bench-gateway: deps venv .venv-triton/.stamp
	$(BIN)/python bench/gateway_overhead.py
