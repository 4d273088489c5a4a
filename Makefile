# cardquota — developer entry points. `make demo` and `make test` work on a fresh clone with only python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --quiet --disable-pip-version-check
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help demo test lint unit bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

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

lint: $(VENV)/.stamp-test ## ruff, mypy --strict and the import-linter contracts (the core stays pure)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(VENV)/.stamp-test ## the fast unit tests only
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test: lint ## everything CI runs: lint, import contracts, unit/integration/e2e tests (e2e skips without Docker)
	@$(BIN)/pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$status

bench: $(VENV)/.stamp-test ## benchmarks (ratios against an in-run baseline)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/webhook.py
	$(BIN)/python bench/ledger.py

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .hypothesis .pytest_cache .ruff_cache build *.egg-info
