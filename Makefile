# cardquota — developer entry points. `make demo` and `make test` work on a fresh clone with only python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --quiet --disable-pip-version-check
PYTEST_ARGS ?=
# pytest-xdist workers: most tests wait on sockets and subprocesses, so 4 keep 2 cores busy (0: one process)
TEST_WORKERS ?= 4
XDIST := -n $(TEST_WORKERS)
IMAGE ?= cardquota:dev
# The package version (pyproject.toml): the release image's tag, the wheel's and the krew archive's names
VERSION := $(shell sed -n 's/^version = "\([^"]*\)"$$/\1/p' pyproject.toml)
DIST := build/dist
KIND_CLUSTER ?= cardquota
DOCKER ?= docker
KIND ?= kind
KUBECTL ?= kubectl
VOLCANO_VERSION ?= v1.15.1
CC ?= cc
COMPILED := build/compiled
VOLCANO_MANIFEST ?= https://raw.githubusercontent.com/volcano-sh/volcano/$(VOLCANO_VERSION)/installer/volcano-development.yaml

.DEFAULT_GOAL := help
.PHONY: help demo test lint unit docs-serve compiled test-compiled run-compiled bench image volcano deploy undeploy e2e kind-up kind-down clean \
	dist constraints krew cluster-check control-plane control-plane-pin e2e-local bench-control-plane bench-gate-burst

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || { echo "cannot create $(VENV): install Python's venv module (Debian: apt-get install python3-venv)"; exit 1; }

$(VENV)/.stamp-runtime: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	@touch $@

$(VENV)/.stamp-test: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[test]'
	@touch $@ $(VENV)/.stamp-runtime

demo: $(VENV)/.stamp-runtime ## card types, per-queue usage and admission checks on the bundled example cluster
	@echo "== card types discovered from examples/cluster.yaml"
	@$(BIN)/cardquota discover -f examples/cluster.yaml -o table
	@echo
	@echo "== per-queue card usage"
	@$(BIN)/cardquota usage --cluster examples/cluster.yaml -o table
	@echo
	@echo "== cardquota check: manifests the admission webhooks accept (some mutated)"
	@$(BIN)/cardquota check -f examples/check/good.yaml --cluster examples/cluster.yaml -o table
	@echo
	@echo "== cardquota check: manifests they refuse, with the message kubectl apply would show (exit 1 expected)"
	@$(BIN)/cardquota check -f examples/check/bad.yaml --cluster examples/cluster.yaml -o table || [ $$? -eq 1 ]
	@echo
	@echo "== cardquota check: a Deployment, its HPA and a CronJob, told at apply time (exit 1 expected)"
	@$(BIN)/cardquota check -f examples/workloads/inference.yaml --cluster examples/cluster.yaml -o table || [ $$? -eq 1 ]
	@echo
	@echo "== cardquota simulate: where the example workload would go, with the scheduler's rules"
	@$(BIN)/cardquota simulate --cluster examples/cluster.yaml -f examples/simulate/workload.yaml -o table || [ $$? -eq 1 ]

lint: $(VENV)/.stamp-test ## ruff, mypy --strict and the import-linter contracts (the core stays pure)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(VENV)/.stamp-test ## the fast unit tests only
	$(BIN)/pytest $(XDIST) tests/unit $(PYTEST_ARGS)

# MkDocs comes with the test extra (pyproject.toml), not with cardquota: this installs it into .venv first.
docs-serve: $(VENV)/.stamp-test ## the documentation site (docs/) at http://127.0.0.1:8000, rebuilt as you edit
	$(BIN)/mkdocs serve

test: lint ## everything CI runs: lint, import contracts, unit/integration/e2e tests (e2e skips without Docker), then the suites against the compiled core
	@mkdir -p build && rm -f build/compiled.rc build/compiled.log; \
	if $(CC) --version >/dev/null 2>&1; then \
		( $(MAKE) --no-print-directory compiled > build/compiled.log 2>&1; echo $$? > build/compiled.rc ) & \
	else echo "make test: the compiled core is skipped: no C compiler ('$(CC)') to build it"; fi; \
	$(BIN)/pytest $(XDIST) $(PYTEST_ARGS); status=$$?; wait; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; status=0; fi; \
	[ $$status -eq 0 ] || exit $$status; \
	[ -f build/compiled.rc ] || exit 0; \
	cat build/compiled.log; [ "$$(cat build/compiled.rc)" = 0 ] || { echo "make test: the compiled build failed"; exit 1; }; \
	$(MAKE) --no-print-directory run-compiled
	@$(MAKE) --no-print-directory krew

# The compiled build (setup.py, CARDQUOTA_COMPILE=1) is made from a copy of the working tree (tracked and new files,
# symlinks kept) in $(COMPILED)/tree, so that no build/ left over from an earlier build leaks into the wheel.
compiled: $(VENV)/.stamp-test ## the wheel with the core compiled by mypyc, in dist/ (what the image ships; needs a C compiler)
	@$(CC) --version >/dev/null 2>&1 || { echo "make compiled: no C compiler ('$(CC)'): install gcc"; exit 1; }
	@git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "make compiled: needs a git checkout (it copies the files git knows)"; exit 1; }
	rm -rf $(COMPILED) && mkdir -p $(COMPILED)/tree $(COMPILED)/wheel $(COMPILED)/unpacked dist
	git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null \
		| tar -xf - -C $(COMPILED)/tree
	cd $(COMPILED)/tree && CARDQUOTA_COMPILE=1 $(abspath $(BIN))/python -m pip wheel --quiet \
		--disable-pip-version-check --no-deps --no-build-isolation -w ../wheel .
	cp $(COMPILED)/wheel/cardquota-*.whl dist/
	@echo "make compiled: $$(ls dist/cardquota-*linux*.whl)"

test-compiled: ## the unit suite and the core's integration tests against the compiled core (skipped, with a message, without a C compiler)
	@if ! $(CC) --version >/dev/null 2>&1; then \
		echo "make test-compiled: skipped: no C compiler ('$(CC)') to build the compiled core"; exit 0; fi; \
	$(MAKE) --no-print-directory compiled && $(MAKE) --no-print-directory run-compiled

# The suites against the wheel `make compiled` built: its extension modules laid over the copied tree. Only the core
# (and the admission edges, setup.py's COMPILED_EDGES) is compiled, so the rerun is the unit suite — which runs every
# rule of the core — and the integration tests that drive the compiled core through the real servers: the webhook over
# HTTPS, admissions in the loop of the API server's dispatchers, the extender over HTTP and through Volcano v1.15.1's
# replayed actions, the card-quota gate and its preemption against kmock. The rest of the integration suite (processes,
# certificates, CRDs, doctor, RBAC, reflectors, ... around the core, the same compiled or not) and a few unit files
# about scripts and manifests run in the first pass only. About 1.5 minutes of worker time.
BENCH_SMOKE = tests/unit/test_bench_smoke.py
COMPILED_INTEGRATION = tests/integration/test_webhook_https.py tests/integration/test_admission_in_the_loop.py \
	tests/integration/test_extender_http.py tests/integration/test_volcano_conformance.py \
	tests/integration/test_card_gate_kmock.py tests/integration/test_preemption_kmock.py
COMPILED_SKIPPED = --ignore=tests/unit/test_e2e_guard.py --ignore=tests/unit/test_pods_start.py \
	--ignore=tests/unit/test_chart.py --ignore=tests/unit/test_cel_cost.py --ignore=tests/unit/test_rbac_inventory.py \
	--deselect $(BENCH_SMOKE)::test_bounded_servers_bench_reports_every_figure_for_both_servers \
	--deselect $(BENCH_SMOKE)::test_scale_bench_smoke_reports_every_figure \
	--deselect $(BENCH_SMOKE)::test_tls_start_bench_reports_start_and_handshake_figures \
	--deselect $(BENCH_SMOKE)::test_ratcheting_bench_reports_every_case \
	--deselect $(BENCH_SMOKE)::test_fair_serving_bench_reports_every_figure_against_the_no_attack_baseline
run-compiled:
	$(BIN)/python -m zipfile -e $(COMPILED)/wheel/cardquota-*.whl $(COMPILED)/unpacked && \
	(cd $(COMPILED)/unpacked && find . -name '*.so' | tar -cf - -T -) | tar -xf - -C $(COMPILED)/tree && \
	cd $(COMPILED)/tree && CARDQUOTA_EXPECT_COMPILED=1 PYTHONPATH=$$PWD $(abspath $(BIN))/pytest $(XDIST) tests/unit $(COMPILED_INTEGRATION) $(COMPILED_SKIPPED) $(PYTEST_ARGS)

# The release artifacts (nothing is uploaded): the sdist, the pure wheel built from it (what `pip install` gets; the
# image ships the compiled one, `make compiled`), checked by twine and by tests/tools/check_dist.py, which installs
# the wheel alone into a fresh virtualenv and runs both commands (its docstring says what that does not prove).
dist: $(VENV)/.stamp-test ## the sdist and the pure wheel in build/dist, twine-checked, installed into a fresh venv and run
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@$(BIN)/python -m build --no-isolation --outdir $(DIST) . > build/dist.log 2>&1 \
		|| { cat build/dist.log; echo "make dist: python -m build failed"; exit 1; }
	@$(BIN)/twine check --strict $(DIST)/*
	@$(BIN)/python tests/tools/check_dist.py $(DIST)

# kubectl cardquota as a krew plugin: an archive (a launcher that installs the wheel into a virtualenv on first run,
# the wheel, constraints.txt, LICENSE) and plugins/cardquota.yaml filled with its uri and sha256, both checked against
# krew's manifest rules (tests/tools/krew_manifest.py). Nothing is published: KREW_URL_BASE is where you put the
# archive; until you set it, the uri is under .invalid (never resolves), and --archive installs from the file.
KREW_URL_BASE ?= https://releases.invalid/cardquota/v$(VERSION)
krew: dist ## the krew plugin archive and its filled manifest in build/krew (KREW_URL_BASE: where you publish the archive)
	@$(BIN)/python tests/tools/krew_manifest.py $(DIST) build/krew $(KREW_URL_BASE)

# Asks the package index (PyPI) once; the image build installs with these pins, and tests/unit/test_release.py fails
# when pyproject.toml's dependencies change without this being run again.
constraints: $(VENV)/.stamp-runtime ## pin every runtime dependency (pip's resolution of pyproject.toml for the image) in constraints.txt
	$(BIN)/python tests/tools/pin_constraints.py constraints.txt

bench: $(VENV)/.stamp-test ## benchmarks (ratios against an in-run baseline)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/webhook.py
	$(BIN)/python bench/ledger.py
	$(BIN)/python bench/extender.py
	$(BIN)/python bench/worst_case.py
	$(BIN)/python bench/publisher.py
	$(BIN)/python bench/extender_cycle.py
	$(BIN)/python bench/heartbeat.py
	$(BIN)/python bench/preemption.py
	$(BIN)/python bench/bounded.py
	$(BIN)/python bench/fair_serving.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/tls_start.py
	$(BIN)/python bench/scale.py

image: ## build the container image as IMAGE (cardquota:dev) and cardquota:<version> (skipped, with a message, where no Docker daemon is usable)
	@if ! $(DOCKER) info >/dev/null 2>&1; then \
		echo "make image: skipped: no usable Docker daemon ('$(DOCKER) info' failed)"; exit 0; fi; \
	$(DOCKER) build --label org.opencontainers.image.version=$(VERSION) -t $(IMAGE) -t cardquota:$(VERSION) .

kind-up: ## create the kind cluster (KIND_CLUSTER=cardquota) if absent and load the image into it
	@command -v $(KIND) >/dev/null || { echo "make kind-up: '$(KIND)' not found (https://kind.sigs.k8s.io)"; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "make kind-up: no usable Docker daemon"; exit 1; }
	@$(KIND) get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)' || $(KIND) create cluster --name $(KIND_CLUSTER) --wait 180s
	@$(MAKE) --no-print-directory image
	$(KIND) load docker-image $(IMAGE) --name $(KIND_CLUSTER)

kind-down: ## delete the kind cluster
	$(KIND) delete cluster --name $(KIND_CLUSTER)

# The cluster of kubectl's current context answers (kubectl's own first error line otherwise: no kubeconfig, a refused
# connection, an expired credential), told apart from a cluster that answers but runs no Volcano (cluster-check).
REACHABLE = out=$$($(KUBECTL) get --raw /version --request-timeout=10s 2>&1 >/dev/null) || { \
	echo "the cluster of kubectl's current context ($$($(KUBECTL) config current-context 2>/dev/null || echo none))" \
		"cannot be reached: $$(printf '%s\n' "$$out" | head -n 1)"; \
	echo "  check KUBECONFIG and 'kubectl config current-context' (for a local kind cluster: make kind-up)"; exit 1; }

cluster-check: ## does kubectl's current cluster answer, and does it run Volcano? (make deploy's first step)
	@$(REACHABLE); \
	out=$$($(KUBECTL) get crd queues.scheduling.volcano.sh -o name --request-timeout=10s 2>&1) || { \
		case "$$out" in \
		*NotFound*) echo "Volcano is not installed on this cluster (no queues.scheduling.volcano.sh CRD): install it" \
			"first, or run 'make volcano' for stock Volcano $(VOLCANO_VERSION)";; \
		*) echo "cannot read Volcano's Queue CRD: $$(printf '%s\n' "$$out" | head -n 1)";; \
		esac; exit 1; }

volcano: ## install stock Volcano (VOLCANO_VERSION=v1.15.1) from its release manifest, for a cluster without one
	@$(REACHABLE)
	@if $(KUBECTL) get crd queues.scheduling.volcano.sh >/dev/null 2>&1; then \
		echo "make volcano: Volcano's CRDs are already installed: left as they are"; exit 0; fi; \
	$(KUBECTL) apply --server-side -f $(VOLCANO_MANIFEST) && \
	$(KUBECTL) -n volcano-system rollout status deployment/volcano-scheduler --timeout=300s

deploy: cluster-check $(VENV)/.stamp-runtime ## patch cardquota's additions into Volcano's CRDs, then install cardquota (overlays/dev)
	$(BIN)/kubectl-cardquota crd install
	$(KUBECTL) apply -k manifests/overlays/dev
	$(KUBECTL) -n cardquota-system rollout status deployment/cardquota --timeout=180s

undeploy: ## remove cardquota; Volcano, its CRDs and every queue stay ('kubectl cardquota crd uninstall' removes our CRD additions)
	$(KUBECTL) delete -k manifests/overlays/dev --ignore-not-found

# The tests refuse every cluster but a kind cluster they create or the context CARDQUOTA_E2E_CONTEXT names (a
# KUBECONFIG alone is refused), print what they will change first, and put it all back (tests/e2e/README.md).
e2e: $(VENV)/.stamp-test ## end-to-end tests on a throw-away kind cluster (or CARDQUOTA_E2E_CONTEXT=<context>, restored after)
	CARDQUOTA_E2E=1 $(BIN)/pytest tests/e2e -v $(PYTEST_ARGS)

# The local control plane (tests/e2e/local): etcd, kube-apiserver, kube-controller-manager, kubectl, Volcano and kwok
# built from their Go modules at the versions of tests/e2e/local/versions.env, once per machine, into a folder of
# CONTROL_PLANE_CACHE named after those pins (outside the repository; a later build with the same pins returns at once).
CONTROL_PLANE_CACHE ?= $(HOME)/.cache/cardquota/control-plane
CONTROL_PLANE = $(PYTHON) tests/e2e/local/build.py
control-plane: ## build the local control plane's binaries from their Go modules (needs Go; once per machine)
	@$(CONTROL_PLANE) build --cache $(CONTROL_PLANE_CACHE)

control-plane-pin: ## after editing tests/e2e/local/versions.env: rewrite the components' go.mod/go.sum (asks the module proxy)
	@$(CONTROL_PLANE) pin

# The end-to-end tests against that control plane on this machine, in namespaces of the run's own (network, mount,
# PID: nothing outlives it), with Volcano and cardquota installed as the README says (tests/e2e/local/run.py).
e2e-local: $(VENV)/.stamp-test control-plane ## end-to-end tests against a real API server, Volcano and kwok nodes on this machine (root; no Docker)
	@$(BIN)/python tests/e2e/local/run.py --control-plane "$$($(CONTROL_PLANE) where --cache $(CONTROL_PLANE_CACHE))" \
		-- $(BIN)/pytest tests/e2e -v -p no:xdist $(PYTEST_ARGS)

# Volcano's own cycle at cluster size (kwok nodes and pods), without and with cardquota's stanza (bench/volcano_cycle.py).
BENCH_ARGS ?=
bench-control-plane: $(VENV)/.stamp-test control-plane ## Volcano's cycle at 1,000 kwok nodes × 20 pods, without and with cardquota's stanza (root)
	@$(BIN)/python tests/e2e/local/run.py --control-plane "$$($(CONTROL_PLANE) where --cache $(CONTROL_PLANE_CACHE))" \
		--logs build/bench-control-plane -- $(BIN)/python bench/volcano_cycle.py $(BENCH_ARGS)

# Creation to the lifting of the card-quota gate under a burst of card pods (bench/gate_burst.py).
bench-gate-burst: $(VENV)/.stamp-test control-plane ## creation → gate lifted, p50/p99, for a burst of 1,000 card pods on a real API server (root)
	@$(BIN)/python tests/e2e/local/run.py --control-plane "$$($(CONTROL_PLANE) where --cache $(CONTROL_PLANE_CACHE))" \
		--logs build/bench-gate-burst -- $(BIN)/python bench/gate_burst.py $(BENCH_ARGS)

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .hypothesis .pytest_cache .ruff_cache build dist *.egg-info
