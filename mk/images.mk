# Container images of the serving layer (serving/images/): podman from a debootstrap base of Debian's
# packages, pinned in platform_matrix/matrix.yml (container_base); no registry is needed.
#   make image-base      the base image (debootstrap tarball cached in LAB_CACHE_DIR, then podman import)
#   make image-gateway   localhost/gpu-serving/gateway:<revision>, entrypoint python -m serving.gateway, port 8000
#   make image-drift     localhost/gpu-serving/drift:<revision>, entrypoint python -m serving.drift, port 8080
# Needs the Debian packages podman, buildah, runc and debootstrap, from `make deps`.
.PHONY: image-base image-gateway image-drift

image-base image-gateway image-drift: image-%: deps venv
	$(BIN)/python -m serving.images $*
