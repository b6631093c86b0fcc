"""pb_utils' `ModelConfig`: what a model's `auto_complete_config(auto_complete_model_config)`
receives and returns, with python_backend's rules and words.

A model may set `max_batch_size` (not below the config's), a dynamic batcher (unless the config
has another scheduler), `model_transaction_policy` (only `decoupled`, and not against the
config's), and add inputs and outputs: each needs `name`, `data_type` and `dims` (an input may
say `optional`) and nothing else; one the config already names must agree with it (a config's
`TYPE_INVALID` or empty `dims` is filled in). Every refusal is a ValueError in Triton's words,
which the load reports (L0_model_config's `autofill_noplatform/python` cases grep for them).
Stdlib only: stub processes import it through pb_utils.
"""

import json

__all__ = ["ModelConfig"]

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")
_ONLY = {
    "input": "'name', 'data_type', 'dims' and 'optional'",
    "output": "'name', 'data_type' and 'dims'",
}


class ModelConfig:
    """The wrapper `auto_complete_config(auto_complete_model_config)` receives and returns."""

    def __init__(self, model_config):
        self._model_config = (
            model_config if isinstance(model_config, dict) else json.loads(model_config)
        )

    def as_dict(self):
        return self._model_config

    def max_batch_size(self):
        return int(self._model_config.get("max_batch_size", 0))

    def set_max_batch_size(self, max_batch_size):
        """A config's non-zero `max_batch_size` above the model's is refused."""
        current = self.max_batch_size()
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self):
        """The dynamic batcher, unless the config has another scheduler (refused then)."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name()}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict):
        """Only `decoupled`, and not against a `decoupled` the config sets."""
        if any(key != "decoupled" for key in transaction_policy_dict):
            raise ValueError(
                "model transaction property in auto-complete-config function for model "
                f"'{self._name()}' contains property other than 'decoupled'."
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" not in transaction_policy_dict:
            return
        wanted = transaction_policy_dict["decoupled"]
        if "decoupled" in policy and policy["decoupled"] != wanted:
            raise ValueError(
                f"trying to change decoupled property in auto-complete-config for model "
                f"'{self._name()}', which is already set to '{policy['decoupled']}'."
            )
        policy["decoupled"] = wanted

    def add_input(self, input):
        self._add_tensor("input", input, _INPUT_PROPERTIES)

    def add_output(self, output):
        self._add_tensor("output", output, _OUTPUT_PROPERTIES)

    def _name(self):
        return self._model_config.get("name", "")

    def _add_tensor(self, kind, tensor, properties):
        if not isinstance(tensor, dict):
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name()}' must be "
                f"a dict, got {type(tensor).__name__}"
            )
        named = f"{kind} '{tensor['name']}'" if "name" in tensor else kind
        where = f"in auto-complete-config function for model '{self._name()}'"
        if any(key not in properties for key in tensor):
            raise ValueError(f"{named} {where} contains property other than {_ONLY[kind]}.")
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{named} {where} is missing '{key}' property.")
        known = self._model_config.setdefault(kind, [])
        for current in known:
            if current.get("name") == tensor["name"]:
                self._agree(kind, current, tensor)
                current["data_type"], current["dims"] = tensor["data_type"], tensor["dims"]
                if "optional" in tensor:
                    current["optional"] = tensor["optional"]
                return
        known.append(tensor)

    def _agree(self, kind, current, tensor):
        """A tensor the config names: its data type and dims, where set, are the model's."""
        name, model = tensor["name"], self._name()
        datatype = current.get("data_type", "TYPE_INVALID")
        if datatype != "TYPE_INVALID" and datatype != tensor["data_type"]:
            raise ValueError(
                f"unable to load model '{model}', configuration expects datatype {datatype} "
                f"for {kind} '{name}', model provides {tensor['data_type']}"
            )
        dims = current.get("dims") or []
        if dims and list(dims) != list(tensor["dims"]):
            raise ValueError(
                f"model '{model}', tensor '{name}': the model expects dims "
                f"{list(tensor['dims'])} but the model configuration specifies dims {list(dims)}"
            )
        optional = current.get("optional", tensor.get("optional"))
        if "optional" in tensor and optional != tensor["optional"]:
            raise ValueError(
                f"model '{model}', tensor '{name}': the model expects optional "
                f"{tensor['optional']} but the model configuration specifies optional "
                f"{optional}"
            )
