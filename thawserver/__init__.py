"""The server parts both servers mount: `thaw serve` (runtime) and `thaw up` (activator).

Code both servers run the same way, as opposed to thawwire's agreements between processes; it
imports no Thaw package but the leaves `thawwire` and `tritonconfig`. Import each part by its
module name (several import aiohttp or grpc); this `__init__` imports nothing, because
`runtime.python.stub` reaches `fast_json` under an interpreter that may hold only numpy.

    aiohttp_compat        the only private aiohttp access, each part pinned by a test
    connection_guard      deadlines for slow and idle clients, a cap on connections
    connection_drain      a stopping server's countdown for the connections clients hold open
    connection_limits     one set of connection limits for both servers
    limit_flags           the connection limits' command-line flags, for both CLIs
    tool_call_flags       the OpenAI routes' tool-calling flags, for both CLIs
    lora_flags            the OpenAI routes' `--lora-separator`, for both CLIs
    max_tokens_flag       the OpenAI routes' `--default-max-tokens`, for both CLIs
    host_metrics          Triton's host gauges (nv_cpu_*) on both servers' /metrics
    gpu_metrics           Triton's per-GPU families (nv_gpu_*, nv_energy_*) via NVML, both servers
    metric_values         sample values on /metrics as Triton writes them (`3`, not `3.0`)
    metrics_config_flags  tritonserver's `--metrics-config` (latency counters, summaries), both CLIs
    handed_defaults       flag defaults handed through the environment, refused as the flag would be
    fd_limit              the open-file limit: raised at start-up, what it leaves
    transfer_coding       refusing a transfer coding the server does not implement
    chunked_over_length   a request with both `Content-Length` and chunked
    grpc_routes           the route table of a `GRPCInferenceService` surface and grpc.health.v1
    grpc_status           the gRPC status code of each v2 error
    grpc_bind             both servers' gRPC bind; a refusal in the system's words
    grpc_compression      tritonserver's gRPC response compression level: values, server option
    model_config_name_flag  tritonserver's `--model-config-name`, for both CLIs
    grpc_keepalive        tritonserver's gRPC keepalive and ping flags: values, server options
    grpc_tls              tritonserver's gRPC TLS flags: files read and checked once, credentials
    reuse_port_flags      tritonserver's `--reuse-http-port` / `--reuse-grpc-port`, for both CLIs
    shm_api               the shared-memory extension's calls: register, status, unregister
    shm_registry          the system shared-memory regions clients registered
    settings_api          the logging and trace extensions' calls, REST and gRPC
    settings_flags        the logging and trace extensions' command-line flags, for both CLIs
    log_control           this process's logging, governed by the log settings
    log_records           tritonserver's log records (default, ISO8601), escaped; stdlib only
    redaction             the server's own paths cut out of every error message
    python_imports        the installed packages Python models import: what spare stubs import ahead
    stub_instances        the most stub processes one Python model starts: how many spares
    restricted_protocols  Triton's restricted-API flags: grammar, categories, header
    restricted_routes     the one HTTP route guard of a restricted category (each server its error)
    body_deadline         a request body that did not arrive in time: its status (408), its text
    body_limit            a request's body cap (the client's or the platform's own) and its 413 text
    cache_counters        an image cache directory's eviction counters
    cache_flags           tritonserver's response-cache flags, for both CLIs
    rate_limit_flags      tritonserver's rate-limiter flags and their grammar, for both CLIs
    rate_limit_resources  what instances need of rate-limiter resources; Triton's two load refusals
    backend_config_flags  tritonserver's `--backend-config` flag and its grammar, for both CLIs
    repository_flags      tritonserver's repository flags (and their refusals), for both CLIs
    s3_client             the one boto3 S3 client configuration (snapshot stores, repositories)
    s3_repository/        model repositories on S3, served from a local mirror (both CLIs)
    bool_flag             tritonserver's boolean flag values, for both CLIs
    flag_names            a message's settings named as their flags are typed, for both CLIs
    triton_flag_names     tritonserver's flags: all of them, those ignored, the refusal, both CLIs
    device_flags          tritonserver's device flags: serve applies them, up gives its replicas
    json_response         the one JSON response both servers write
    fast_json             orjson's speed with the stdlib `json` module's results
    ranges                the one range check and its one phrasing
"""

from __future__ import annotations

__all__: list[str] = []
