"""The compiled artifacts an image carries beside its weights, chosen from the model's
`config.pbtxt` and the target, then built and verified at build time.

- torch.export programs with `TORCH_COMPILE_OPTIONAL_PARAMETERS`: the torch compile caches
  (`compile_cache`), for `cpu` or the `cuda:sm_NN` GPU this machine has;
- ONNX models with the `tensorrt` GPU accelerator, for `cuda:sm_NN` images: onnxruntime's
  TensorRT engine and timing caches and its EP-context model (`trt_cache`);
- `tensorrt_plan` models, for `cuda:sm_NN` images: the plan itself (`plan_engine`), checked by
  deserializing it on this GPU (a `cpu` image of a plan has nothing in it: NothingToImage).

Each comes with its key (`artifact_keys` in the manifest). Building a GPU artifact needs that
GPU: a `cuda:sm_NN` build on a machine without it fails with a message saying so, instead of
storing an image that promises caches it does not have.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snapshotter import compile_cache, plan_engine, trt_cache
from snapshotter.artifact_archive import pack_dir
from snapshotter.errors import BuildError, NothingToImage
from snapshotter.sources import ExtractedModel
from tritonconfig import ModelConfigError
from tritonconfig.tensorrt_accelerator import tensorrt_parameters, tensorrt_provider_options
from tritonconfig.torch_compile import TORCH_COMPILE_PARAMETER, CompileSettings, compile_settings

logger = logging.getLogger(__name__)


@dataclass
class Compiled:
    """Artifacts (name -> bytes) and their keys (name -> key fields) for the manifest."""

    artifacts: dict[str, bytes] = field(default_factory=dict)
    keys: dict[str, dict[str, str]] = field(default_factory=dict)

    def add(self, name: str, data: bytes, key: dict[str, str]) -> None:
        self.artifacts[name], self.keys[name] = data, key


def read_model_config(model_dir: Path) -> Any | None:
    """`<model_dir>/config.pbtxt` as a Triton `ModelConfig`, or None when there is none."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    path = model_dir / "config.pbtxt"
    if not path.is_file():
        return None
    try:
        return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise BuildError(f"{path}: not a valid model configuration: {exc}") from exc


def build_compiled(
    version_dir: Path, extracted: ExtractedModel, target: str, *, source_digest: str = ""
) -> Compiled:
    """Every compiled artifact the model's config asks for on `target` (see the module doc);
    `source_digest` (the model files') goes into engine keys."""
    out = Compiled()
    if extracted.framework == "tensorrt_plan":
        _plan(version_dir / "model.plan", target, out, source_digest)
        return out
    config = read_model_config(version_dir.parent)
    if config is None:
        return out
    try:
        settings = compile_settings(config)
        trt_params = tensorrt_parameters(config)
        trt_options = (
            tensorrt_provider_options(trt_params, device_id=0) if trt_params is not None else None
        )
    except ModelConfigError as exc:
        raise BuildError(f"{version_dir.parent / 'config.pbtxt'}: {exc}") from exc
    if settings is not None and extracted.framework == "torch_export":
        _torch_compile(version_dir / "model.pt2", config, settings, target, out)
    elif settings is not None:
        logger.warning(
            "%s: `%s` applies to torch.export programs (model.pt2); torch.compile cannot "
            "compile a %s model, so the image carries no compile cache",
            version_dir, TORCH_COMPILE_PARAMETER, extracted.framework,
        )  # fmt: skip
    if trt_options is not None and extracted.framework == "onnx":
        if target == "cpu":
            logger.info("%s: the tensorrt accelerator runs on GPUs; a cpu image has no engines",
                        version_dir)  # fmt: skip
        else:
            _tensorrt(extracted, trt_options, target, out, source_digest)
    return out


def build_device(target: str, what: str) -> str:
    """The torch device that builds `what` for `target`; a GPU target needs that GPU here."""
    if target == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise BuildError(
            f"target {target}: building {what} needs a CUDA device, and this machine has none; "
            "build this image on a node with that GPU"
        )
    major, minor = torch.cuda.get_device_capability(0)
    if f"cuda:sm_{major}{minor}" != target:
        raise BuildError(
            f"target {target}: building {what} needs that GPU, and this machine's is "
            f"sm_{major}{minor}; build this image on a node with that GPU"
        )
    return "cuda:0"


def _torch_compile(
    path: Path, config: Any, settings: CompileSettings, target: str, out: Compiled
) -> None:
    import torch
    from torch.compiler._cache import CacheArtifactManager

    inputs = compile_cache.warmup_inputs(config)
    if inputs is None:
        logger.warning("%s: an input has no sample form; no torch compile cache built", path)
        return
    device = build_device(target, "the torch compile cache")
    try:
        program = torch.export.load(str(path))
    except Exception as exc:  # torch raises RuntimeError, KeyError, zipfile errors...
        raise BuildError(f"{path}: not a loadable torch.export program: {exc}") from exc
    module = program.module().to(device)
    forward_args = [str(name) for name in program.graph_signature.user_inputs]
    positions = compile_cache.arg_positions([i.name for i in inputs], forward_args)
    args = compile_cache.sample_args(inputs, positions, device)
    with torch.inference_mode():
        eager = module(*args)
    # A fresh artifact record and a fresh inductor directory: the image gets this model's
    # compile and nothing an earlier one in this process left behind.
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory(prefix="thaw-inductor-") as tmp:
        with CacheArtifactManager.with_fresh_cache():
            try:
                _, compiled_out = compile_cache.compile_and_warm(module, settings, args, Path(tmp))
            except Exception as exc:  # dynamo/inductor raise many types (BackendCompilerFailed)
                raise BuildError(f"{path}: torch.compile failed: {exc}") from exc
            saved = torch.compiler.save_cache_artifacts()
        # Nothing on disk (a backend other than inductor): no kernels artifact.
        has_files = any(p.is_file() for p in Path(tmp).rglob("*") if "locks" not in p.parts)
        kernels = pack_dir(Path(tmp), skip=frozenset({"locks"})) if has_files else None
    torch._dynamo.reset()
    try:
        torch.testing.assert_close(compiled_out, eager, rtol=1e-4, atol=1e-5)
    except AssertionError as exc:
        logger.warning("%s: compiled outputs differ from eager; no compile cache stored: %s",
                       path, exc)  # fmt: skip
        return
    if saved is not None:
        out.add(compile_cache.CACHE_ARTIFACT, saved[0],
                compile_cache.compile_key(target, settings, inputs))  # fmt: skip
    if kernels is not None:
        out.add(compile_cache.KERNELS_ARTIFACT, kernels,
                compile_cache.compile_key(target, settings, inputs, kernels=True))  # fmt: skip


def _plan(path: Path, target: str, out: Compiled, digest: str) -> None:
    """The plan as a keyed artifact, after checking that it deserializes on this GPU."""
    if target == "cpu":
        raise NothingToImage(f"{path}: a TensorRT plan runs on a GPU; a cpu image has nothing")
    build_device(target, "the image of a TensorRT plan")
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise BuildError(f"{path}: checking a TensorRT plan needs the `tensorrt` package") from exc
    data = path.read_bytes()
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    if runtime.deserialize_cuda_engine(data) is None:
        raise BuildError(f"{path}: TensorRT {trt.__version__} cannot deserialize this plan here")
    key = plan_engine.plan_key(
        target, tensorrt=plan_engine.tensorrt_module_version(), model_digest=digest
    )
    out.add(plan_engine.ARTIFACT, data, key)


def _tensorrt(
    extracted: ExtractedModel, options: dict[str, str], target: str, out: Compiled, digest: str
) -> None:
    build_device(target, "TensorRT engines")
    graph = extracted.artifacts.get("onnx_graph")
    if graph is None:
        raise BuildError("TensorRT engines are built from the portable ONNX graph; it is missing")
    tensors = {t.name: t.array for t in extracted.tensors}
    packed = trt_cache.build_engine_cache(graph, tensors, options)
    if packed is not None:
        key = trt_cache.cache_key(target, options, model_digest=digest)
        out.add(trt_cache.ARTIFACT, packed, key)
