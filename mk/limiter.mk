# cgroup v2 IO/CPU limiter agent (limiter/, tests/limiter/, tests/lab/test_limiter_image.py).
#   make test-limiter                        unit and property tests on a fake cgroup tree
#   make bench-limiter                       scan cost at 100/1,000/5,000 pods (fake tree)
#   make bench-limiter LIMITER_LAB=lab-node-1  plus the reaction time on a running lab VM
#   make image-limiter                       localhost/gpu-serving/limiter:<revision> (podman, serving/images,
#                                            limiter/Containerfile); IMAGE_SAVE=FILE also writes a docker-archive
.PHONY: test-limiter bench-limiter image-limiter

LIMITER_LAB ?=
IMAGE_SAVE ?=

test-limiter: venv
	$(BIN)/pytest tests/limiter

BENCHES += limiter
bench-limiter: venv
	$(BIN)/python bench/limiter_scan.py $(if $(LIMITER_LAB),--lab $(LIMITER_LAB))

image-limiter: deps venv
	$(BIN)/python -m serving.images limiter $(if $(IMAGE_SAVE),--save $(IMAGE_SAVE))
