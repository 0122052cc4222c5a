# The serving lab's batching benchmark on the real tritonserver (.venv-triton: mk/serving.mk;
# perf_analyzer needs libb64-0d).
#   make bench-serving   text-classifier as shipped against itself without dynamic_batching
.PHONY: bench-serving

BENCHES += serving
bench-serving: deps venv .venv-triton/.stamp
	$(BIN)/python bench/serving_batching.py
