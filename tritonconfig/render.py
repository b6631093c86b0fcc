"""A ModelConfig as Triton's `/config` JSON: proto field names, every field, int64 as numbers,
a float of integral value as an integer (`fp32_false_true: [0, 1]`, as protobuf's C++ JSON
writes it), keys in the .proto's declaration order."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor, json_format

from tritonconfig.schema import mc

__all__ = ["config_to_json"]

_FLOAT_TYPES = frozenset(
    {descriptor.FieldDescriptor.TYPE_FLOAT, descriptor.FieldDescriptor.TYPE_DOUBLE}
)
_INT64_TYPES = frozenset(
    {
        descriptor.FieldDescriptor.TYPE_INT64,
        descriptor.FieldDescriptor.TYPE_UINT64,
        descriptor.FieldDescriptor.TYPE_SINT64,
        descriptor.FieldDescriptor.TYPE_FIXED64,
        descriptor.FieldDescriptor.TYPE_SFIXED64,
    }
)


# Fields of tritonclient's newer model_config.proto that Triton 2.51's schema lacks, so its
# `/config` never writes them (observed side by side): left out while at their default.
_NEWER_THAN_TRITON = {"ModelEnsembling": ("max_inflight_requests", 0)}


def config_to_json(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's `/config` returns it: proto names, defaults, int64 as numbers."""
    data = json_format.MessageToDict(
        config, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )
    _numbers_as_tritons(config.DESCRIPTOR, data)
    return _in_field_order(config.DESCRIPTOR, data)


def _in_field_order(desc: descriptor.Descriptor, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its keys in the .proto's declaration order, as Triton writes them."""
    ordered: dict[str, Any] = {}
    for field in desc.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        sub = field.message_type
        if sub is not None and sub.GetOptions().map_entry:
            # A map of messages (`priority_queue_policy`): each value in its own field order.
            entry = sub.fields_by_name["value"].message_type
            if entry is not None and isinstance(value, dict):
                value = {
                    k: _in_field_order(entry, v) if isinstance(v, dict) else v
                    for k, v in value.items()
                }
        elif sub is not None:
            if isinstance(value, list):
                value = [_in_field_order(sub, v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                value = _in_field_order(sub, value)
        ordered[field.name] = value
    for key, value in data.items():  # nothing should be left, but never drop a field
        ordered.setdefault(key, value)
    newer = _NEWER_THAN_TRITON.get(desc.name)
    if newer is not None and ordered.get(newer[0]) == newer[1]:
        del ordered[newer[0]]
    return ordered


def _numbers_as_tritons(desc: descriptor.Descriptor, data: dict[str, Any]) -> None:
    """MessageToDict writes int64 as strings (proto3 JSON), Triton numbers; and a float of
    integral value as `1.0`, Triton (protobuf's C++ writer) as `1`."""
    for field in desc.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.type in _INT64_TYPES:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.type in _FLOAT_TYPES:
            data[field.name] = (
                [_integral(v) for v in value] if isinstance(value, list) else _integral(value)
            )
        elif field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
            sub = field.message_type
            if sub is None:
                continue
            if sub.GetOptions().map_entry:
                _map_int64_to_numbers(sub, value)
            elif isinstance(value, list):
                for item in value:
                    _numbers_as_tritons(sub, item)
            elif isinstance(value, dict):
                _numbers_as_tritons(sub, value)


def _integral(value: Any) -> Any:
    """A float of integral value as an int (NaN and the infinities, strings here, stay)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _map_int64_to_numbers(entry: descriptor.Descriptor, value: dict[str, Any]) -> None:
    value_field = entry.fields_by_name["value"]
    if value_field.message_type is not None:
        for item in value.values():
            _numbers_as_tritons(value_field.message_type, item)
    elif value_field.type in _INT64_TYPES:
        for key in list(value):
            value[key] = int(value[key])
