# Thaw's CPU image: one `thaw` command for every component (activator `thaw up`, runtime
# `thaw serve`, `thaw snapshot`, the cache DaemonSet's `thaw prefetch`), installed in a venv.
#   docker build -t ghcr.io/thaw-serve/thaw:0.1.0 .
# The CUDA variant is Dockerfile.cuda. Bases are pinned to exact releases; pin digests too
# (`FROM image:tag@sha256:...`) where your registry policy asks for it.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/thaw
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY activator ./activator
COPY runtime ./runtime
COPY snapshotter ./snapshotter
COPY thaw ./thaw
COPY tritonconfig ./tritonconfig
# A non-editable install of the `kubernetes` extra (the activator's Kubernetes backend).
RUN /opt/thaw/bin/pip install --upgrade pip \
 && /opt/thaw/bin/pip install -c constraints.txt '.[kubernetes]'

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="thaw" \
      org.opencontainers.image.description="Scale-to-zero, Triton-compatible inference (CPU)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 10001 thaw \
 && useradd --uid 10001 --gid thaw --no-create-home --home-dir /tmp --shell /usr/sbin/nologin thaw \
 && mkdir -p /var/cache/thaw /models \
 && chown thaw:thaw /var/cache/thaw
COPY --from=build /opt/thaw /opt/thaw
ENV PATH=/opt/thaw/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 10001:10001
# 8000: KServe v2 HTTP (activator and runtime); 8008: the activators' peer reports.
EXPOSE 8000 8008
# `thaw up` and `thaw serve` bind 127.0.0.1 unless given `--host 0.0.0.0` (the Helm chart
# passes it, or the pod IP): a container run by hand needs it too.
ENTRYPOINT ["thaw"]
CMD ["--help"]
