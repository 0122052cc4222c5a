# Pages of docs/ generated from the sources (docs/README.md).
#   make docs    docs/versions.md from the matrix, the stack files, the inventories and the serving
#                lab's lock (commit the result: tests/pulumi/test_versions.py checks for drift)
.PHONY: docs

docs: venv
	PYTHONPATH=$(CURDIR):$(CURDIR)/pulumi $(BIN)/python -m gpu_serving.versions --out docs/versions.md
