# containerd as the lab node gets it (Debian 12's package), unpacked under .cache, never installed
# or started: the offline tests run its `config dump` over the drop-in that roles/nvidia_container_toolkit
# writes (tests/unit/test_containerd_drop_in.py), so containerd itself judges the merge.
#   make containerd-binary                   .cache/containerd/root/usr/bin/containerd (once; rm -r .cache/containerd to take a newer one)
.PHONY: containerd-binary

CONTAINERD_CACHE := .cache/containerd
containerd-binary: $(CONTAINERD_CACHE)/.stamp
$(CONTAINERD_CACHE)/.stamp:
	rm -rf $(CONTAINERD_CACHE) && mkdir -p $(CONTAINERD_CACHE)
	apt-cache show containerd >/dev/null 2>&1 || apt-get update -qq
	cd $(CONTAINERD_CACHE) && apt-get download -qq containerd
	dpkg-deb -x $(CONTAINERD_CACHE)/containerd_*.deb $(CONTAINERD_CACHE)/root
	touch $@

test-offline: $(CONTAINERD_CACHE)/.stamp
