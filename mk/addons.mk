# GPU cluster add-ons (roles/k8s_addons, playbooks/k8s_addons.yml).
#   make render-addons                              every inventory -> deploy/addons/<env>/
#   make render-addons INVENTORY=inventories/prod   one inventory
#   make test-addons                                the tests of tests/k8s_addons
ADDON_ENVS := lab staging prod
ADDON_RENDER_ENVS = $(if $(filter command line environment,$(origin INVENTORY)),$(notdir $(INVENTORY)),$(ADDON_ENVS))

.PHONY: render-addons test-addons
render-addons: venv
	@for env in $(ADDON_RENDER_ENVS); do \
	  rm -rf deploy/addons/$$env; \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-playbook -i inventories/$$env playbooks/k8s_addons.yml \
	    -e k8s_addons_mode=render -e k8s_addons_render_dir=$(CURDIR)/deploy/addons/$$env >/dev/null \
	    || { echo "render failed: inventories/$$env (rerun the playbook to see why)"; exit 1; }; \
	  echo "rendered deploy/addons/$$env"; done

test-addons: venv .venv-checkov/.stamp
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest tests/k8s_addons
