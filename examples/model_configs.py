"""The `config.pbtxt` text of each example model, validated against Triton's ModelConfig schema."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

__all__ = [
    "ScaleSettings",
    "bert_config",
    "bert_ensemble_config",
    "resnet50_config",
    "tokenizer_config",
    "validate",
]


@dataclass(frozen=True)
class ScaleSettings:
    """Thaw's per-model autoscaling settings; stored as `parameters`, which Triton ignores."""

    min_replicas: int = 0
    max_replicas: int = 2
    target_concurrency: int = 4
    scale_to_zero_grace_s: int = 60

    def pbtxt(self) -> str:
        """The `parameters { ... }` entries for these settings."""
        items = {
            "thaw.min_replicas": self.min_replicas,
            "thaw.max_replicas": self.max_replicas,
            "thaw.target_concurrency": self.target_concurrency,
            "thaw.scale_to_zero_grace_s": self.scale_to_zero_grace_s,
        }
        return "".join(_parameter(key, str(value)) for key, value in items.items())


def _parameter(key: str, value: str) -> str:
    return f'parameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'


def resnet50_config(scale: ScaleSettings) -> str:
    """ResNet-50 on onnxruntime: FP32 [N,3,224,224] -> FP32 [N,1000] logits, batches up to 8."""
    return (
        'name: "resnet50"\n'
        'platform: "onnxruntime_onnx"\n'
        "max_batch_size: 8\n"
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
        'output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        "dynamic_batching { max_queue_delay_microseconds: 2000 }\n" + scale.pbtxt()
    )


def bert_config(scale: ScaleSettings, *, hidden: int) -> str:
    """The BERT-style encoder: INT64 ids and mask [N,S] -> hidden states [N,S,H], pooled [N,H]."""
    return (
        'name: "bert"\n'
        'platform: "onnxruntime_onnx"\n'
        "max_batch_size: 8\n"
        "input [\n"
        '  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },\n'
        '  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }\n'
        "]\n"
        "output [\n"
        f'  {{ name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, {hidden} ] }},\n'
        f'  {{ name: "pooler_output" data_type: TYPE_FP32 dims: [ {hidden} ] }}\n'
        "]\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n" + scale.pbtxt()
    )


def tokenizer_config(scale: ScaleSettings, *, max_sequence_length: int) -> str:
    """The Python-backend tokenizer: TEXT BYTES [N,1] -> input_ids, attention_mask INT64 [N,S]."""
    return (
        'name: "bert_tokenizer"\n'
        'backend: "python"\n'
        "max_batch_size: 8\n"
        'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        "output [\n"
        '  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },\n'
        '  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }\n'
        "]\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        + _parameter("max_sequence_length", str(max_sequence_length))
        + scale.pbtxt()
    )


def bert_ensemble_config(scale: ScaleSettings, *, hidden: int) -> str:
    """Text in, embeddings out: TEXT -> bert_tokenizer -> (input_ids, attention_mask) -> bert."""
    return (
        'name: "bert_ensemble"\n'
        'platform: "ensemble"\n'
        "max_batch_size: 8\n"
        'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        "output [\n"
        f'  {{ name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, {hidden} ] }},\n'
        f'  {{ name: "pooler_output" data_type: TYPE_FP32 dims: [ {hidden} ] }}\n'
        "]\n"
        "ensemble_scheduling {\n"
        "  step [\n"
        "    {\n"
        '      model_name: "bert_tokenizer"\n'
        "      model_version: -1\n"
        '      input_map { key: "TEXT" value: "TEXT" }\n'
        '      output_map { key: "input_ids" value: "input_ids" }\n'
        '      output_map { key: "attention_mask" value: "attention_mask" }\n'
        "    },\n"
        "    {\n"
        '      model_name: "bert"\n'
        "      model_version: -1\n"
        '      input_map { key: "input_ids" value: "input_ids" }\n'
        '      input_map { key: "attention_mask" value: "attention_mask" }\n'
        '      output_map { key: "last_hidden_state" value: "last_hidden_state" }\n'
        '      output_map { key: "pooler_output" value: "pooler_output" }\n'
        "    }\n"
        "  ]\n"
        "}\n" + scale.pbtxt()
    )


def validate(text: str) -> model_config_pb2.ModelConfig:
    """Parse `text` strictly as Triton's ModelConfig; raises text_format.ParseError if invalid."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())
