"""What `thaw up` (activator) and `thaw serve` (runtime) must agree on over the wire, once.

The activator talks to replicas over HTTP and a handoff socket and imports no runtime code, so
everything both sides must say the same way lives here, one concept per module, as model
configuration lives in `tritonconfig` (the one Thaw package this one may import). Agreements
only: no aiohttp, grpc, argparse or fcntl (import-linter contract); the server code both servers
run is `thawserver`'s.

    paths             the v2 paths about one model; which of them a replica answers itself
    names             the model-name and version rules
    extensions        the v2 extensions `/v2` lists
    server_info       the server's name and version (`/v2`)
    metadata          v2 model metadata from a completed ModelConfig
    datatype_names    `FP32` <-> `TYPE_FP32`, and each datatype's bytes per element
    hop_by_hop        the headers no proxy forwards
    bad_http          the JSON answer to unparsable HTTP
    model_control     the answer to load/unload while the model-control API is off
    load_overrides    a load request's overrides (`config`, `file:`), checked, for both servers
    shm_params        a tensor's `shared_memory_*` parameters, as Triton reads them
    handoff_protocol  the listening line, slots and their states, load reports
    load_answer       what a load call's answer reports beside its status (warm-up time)
    error_marks       a replica's error answer's marks: a model's own error, a gRPC code
    internal_calls    the deployment's token: the platform's own calls (BLS, steps) and their cap
    pool_protocol     the fork server's control frames between `thaw up` and a zygote
    grpc_service      Triton's `GRPCInferenceService`: its protobuf module, its method names
    grpc_messages     the v2 JSON documents both sides build, as gRPC messages
    openai_api        the OpenAI-compatible paths both servers answer, its model and error entries
    openai_lora       LoRA selection's name grammar, the adapters a model's files offer, the refusal
    runtime_parameters  the `thaw.*` model parameters only the runtime reads, and their values
    model_metrics     Triton's per-model `nv_*` families: names, help texts, labels
    cuda_visible      the GPUs `CUDA_VISIBLE_DEVICES` leaves a process, by CUDA's rule
    log_settings      the logging extension's settings and a client's update of them
    trace_settings    the trace extension's settings, global and per model, and their merge
    trace_flags       tritonserver's trace flags read into the operator's trace setting
    errors            the errors it raises: WireError (a broken protocol), SharedMemoryError

Exports the names below; `model_control`, `shm_params`, `load_answer`, `error_marks`,
`internal_calls`, `pool_protocol`, `openai_api`, `openai_lora`, `runtime_parameters`,
`model_metrics`, `cuda_visible`, the settings modules and the gRPC modules are imported by their
module names.
"""

from __future__ import annotations

from thawwire.bad_http import error_body, error_reason
from thawwire.datatype_names import config_to_v2, v2_to_config
from thawwire.errors import WireError
from thawwire.extensions import EXTENSIONS
from thawwire.handoff_protocol import (
    LISTENING_PREFIX,
    SLOTS,
    LoadReport,
    SlotState,
    listening_line,
    listening_url,
)
from thawwire.hop_by_hop import HOP_BY_HOP, connection_tokens
from thawwire.metadata import model_metadata
from thawwire.names import is_model_name, is_version
from thawwire.paths import MODEL, MODEL_VERSION, model_of
from thawwire.server_info import SERVER_NAME, server_metadata, server_version

__all__ = [
    "EXTENSIONS",
    "HOP_BY_HOP",
    "LISTENING_PREFIX",
    "MODEL",
    "MODEL_VERSION",
    "SERVER_NAME",
    "SLOTS",
    "LoadReport",
    "SlotState",
    "WireError",
    "config_to_v2",
    "connection_tokens",
    "error_body",
    "error_reason",
    "is_model_name",
    "is_version",
    "listening_line",
    "listening_url",
    "model_metadata",
    "model_of",
    "server_metadata",
    "server_version",
    "v2_to_config",
]
