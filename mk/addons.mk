# GPU cluster add-ons (roles/k8s_addons, playbooks/k8s_addons.yml). Ansible only renders them;
# Argo CD applies them (the Application gpu-addons syncs deploy/addons/<inventory>).
#   make render-addons                              every inventory -> deploy/addons/<env>/
#   make render-addons INVENTORY=inventories/prod   one inventory
#   make check-ownership                            no object of any stack has two owners
#   make test-addons                                the tests of tests/k8s_addons
# Every inventory folder: the examples and any scripts/new-environment writes.
ADDON_ENVS := $(notdir $(patsubst %/,%,$(wildcard inventories/*/)))
ADDON_RENDER_ENVS = $(if $(filter command line environment,$(origin INVENTORY)),$(notdir $(INVENTORY)),$(ADDON_ENVS))
# Each inventory renders here first: deploy/addons/<env> is replaced only by a render that
# succeeded and whose objects have no second owner in any stack (gpu_serving.ownership).
ADDON_SCRATCH := .cache/addons-render
OWNERSHIP := PYTHONPATH=$(CURDIR):$(CURDIR)/pulumi $(BIN)/python -m gpu_serving.ownership

.PHONY: render-addons check-ownership test-addons
render-addons: venv
	@for env in $(ADDON_RENDER_ENVS); do \
	  rm -rf $(ADDON_SCRATCH)/$$env; \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-playbook -i inventories/$$env playbooks/k8s_addons.yml \
	    -e k8s_addons_render_dir=$(CURDIR)/$(ADDON_SCRATCH)/$$env >/dev/null \
	    || { echo "render failed: inventories/$$env (rerun the playbook to see why)"; exit 1; }; \
	  $(OWNERSHIP) check --source deploy/addons/$$env=$(ADDON_SCRATCH)/$$env >/dev/null \
	    || { echo "render refused: deploy/addons/$$env unchanged"; exit 1; }; \
	  rm -rf deploy/addons/$$env; mv $(ADDON_SCRATCH)/$$env deploy/addons/$$env; \
	  echo "rendered deploy/addons/$$env"; done

check-ownership: venv
	$(OWNERSHIP) check

test-addons: venv .venv-checkov/.stamp
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest tests/k8s_addons
