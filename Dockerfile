# Thaw's CPU image: one `thaw` command for every component (activator `thaw up`, runtime
# `thaw serve`, `thaw snapshot`, the cache DaemonSet's `thaw prefetch`), installed in a venv.
#   docker build -t ghcr.io/thaw-serve/thaw:0.1.0 .       (or `make image`: docs/image.md)
# The CUDA variant is Dockerfile.cuda. The base is pinned to an exact release; pin a digest too
# (`--build-arg BASE_IMAGE=python:3.11.11-slim-bookworm@sha256:...`) where your policy asks.
#
# Contract (docs/image.md): runs as uid/gid 10001 with a read-only root filesystem; the only
# writable paths are the volumes the chart mounts (/tmp, /var/cache/thaw, /dev/shm). Bytecode
# is compiled at build time and never written at run time.
#
# Layers: the dependencies (~1.4 GB) are one layer, rebuilt only when the requirements that
# pyproject.toml names change; the project is a wheel installed on top (~1 MB), so a code
# change rebuilds and pushes only that.
ARG BASE_IMAGE=python:3.11.11-slim-bookworm
# PyTorch's CPU wheels (PyPI's Linux torch is a CUDA build of several GB). Empty: PyPI only
# (`make image` passes it empty and gives pip a find-links folder holding the CPU wheel).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# The requirements, from pyproject.toml: a stage of its own, so an edit elsewhere in
# pyproject.toml leaves the dependency layer cached.
FROM ${BASE_IMAGE} AS requirements
COPY pyproject.toml deploy/image/requirements.py /src/
RUN python3 /src/requirements.py /src/pyproject.toml cpu kubernetes > /requirements.txt

# A C++ compiler and Python's headers: torch.compile (inductor) builds its CPU kernels at run
# time (official python images carry the headers; Debian's python3 needs python3-dev).
# Then the user, and a venv with the dependencies, bytecode compiled (unchecked-hash: valid
# whatever a copy does to mtimes; a read-only root never needs to write it). The interpreter's
# own modules are compiled too (official python images ship them without .pyc); a file for
# newer Pythons (torch's py312 test fixtures) is left as it is.
FROM ${BASE_IMAGE} AS deps
ARG TORCH_INDEX_URL
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ libc6-dev \
 && { python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
      || apt-get install -y --no-install-recommends python3-dev; } \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 thaw \
 && useradd --uid 10001 --gid thaw --no-create-home --home-dir /tmp --shell /usr/sbin/nologin thaw \
 && mkdir -p /var/cache/thaw /models \
 && chown thaw:thaw /var/cache/thaw \
 && { python3 -m compileall -qq -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" || true; } \
 && python3 -m venv /opt/thaw \
 && /opt/thaw/bin/pip install --no-compile --upgrade pip setuptools wheel
COPY --from=requirements /requirements.txt /opt/thaw/requirements.txt
COPY constraints.txt /opt/thaw/constraints.txt
RUN /opt/thaw/bin/pip install --no-compile -c /opt/thaw/constraints.txt -r /opt/thaw/requirements.txt \
      ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
 && { /opt/thaw/bin/python -m compileall -qq -j 0 --invalidation-mode unchecked-hash /opt/thaw/lib \
      || echo "compileall: some files are for newer Pythons"; }

# The project's wheel, from the whole build context (what .dockerignore leaves): every package
# that pyproject.toml's package list finds is in it, none listed here.
FROM deps AS wheel
WORKDIR /src
COPY . .
RUN /opt/thaw/bin/pip wheel --no-deps --no-build-isolation -w /wheel .

FROM deps
LABEL org.opencontainers.image.title="thaw" \
      org.opencontainers.image.description="Scale-to-zero, Triton-compatible inference (CPU)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=wheel /wheel /tmp/wheel
RUN /opt/thaw/bin/pip install --no-compile --no-deps /tmp/wheel/*.whl \
 && rm -rf /tmp/wheel \
 && cd /opt/thaw/lib/python3*/site-packages \
 && /opt/thaw/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      $(cat thaw_serve-*.dist-info/top_level.txt)
# HOME=/tmp: the chart mounts an emptyDir there; `thaw up`'s default image cache
# (~/.cache/thaw/images) and every temporary folder land in it.
ENV PATH=/opt/thaw/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
# 8000: KServe v2 HTTP (activator and runtime); 8001: gRPC; 8002: metrics; 8008: the
# activators' peer reports.
EXPOSE 8000 8001 8002 8008
# `thaw up` and `thaw serve` bind 127.0.0.1 unless given `--host 0.0.0.0` (the Helm chart
# passes it, or the pod IP): a container run by hand needs it too.
ENTRYPOINT ["thaw"]
CMD ["--help"]
