"""Triton's `inference.GRPCInferenceService`: its protobuf module and its method names.

Both `thaw serve` (which implements the service) and `thaw up` (which answers some methods and
forwards the others as opaque bytes) use these names; the messages are the ones `tritonclient`
ships (`tritonclient.grpc.service_pb2`), so a client built from the same protos is served
unchanged. Importing this module imports grpc and tritonclient's gRPC package (~0.1 s beyond
numpy): import it only where a gRPC surface is served.
"""

from __future__ import annotations

from enum import StrEnum

from tritonclient.grpc import service_pb2 as pb

__all__ = ["SERVICE", "UNSUPPORTED", "Method", "method_path", "pb", "unsupported_text"]

SERVICE = "inference.GRPCInferenceService"


class Method(StrEnum):
    """Every method of the service (Triton 2.51's `grpc_service.proto`)."""

    SERVER_LIVE = "ServerLive"
    SERVER_READY = "ServerReady"
    MODEL_READY = "ModelReady"
    SERVER_METADATA = "ServerMetadata"
    MODEL_METADATA = "ModelMetadata"
    MODEL_INFER = "ModelInfer"
    MODEL_STREAM_INFER = "ModelStreamInfer"
    MODEL_CONFIG = "ModelConfig"
    MODEL_STATISTICS = "ModelStatistics"
    REPOSITORY_INDEX = "RepositoryIndex"
    REPOSITORY_MODEL_LOAD = "RepositoryModelLoad"
    REPOSITORY_MODEL_UNLOAD = "RepositoryModelUnload"
    SYSTEM_SHARED_MEMORY_STATUS = "SystemSharedMemoryStatus"
    SYSTEM_SHARED_MEMORY_REGISTER = "SystemSharedMemoryRegister"
    SYSTEM_SHARED_MEMORY_UNREGISTER = "SystemSharedMemoryUnregister"
    CUDA_SHARED_MEMORY_STATUS = "CudaSharedMemoryStatus"
    CUDA_SHARED_MEMORY_REGISTER = "CudaSharedMemoryRegister"
    CUDA_SHARED_MEMORY_UNREGISTER = "CudaSharedMemoryUnregister"
    TRACE_SETTING = "TraceSetting"
    LOG_SETTINGS = "LogSettings"


# Methods Thaw does not implement: both sides answer them UNIMPLEMENTED with a sentence that
# names the feature. None today: shared memory is thawserver.shm_api's, the trace and log
# settings thawserver.settings_api's.
UNSUPPORTED: dict[Method, str] = {}


def method_path(method: Method) -> str:
    """The HTTP/2 path of a method (`/inference.GRPCInferenceService/ModelInfer`)."""
    return f"/{SERVICE}/{method.value}"


def unsupported_text(method: Method) -> str:
    """What an unimplemented method answers."""
    return f"thaw does not implement {UNSUPPORTED[method]} (method {method.value})"
