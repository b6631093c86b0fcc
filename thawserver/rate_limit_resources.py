"""What a model's instances need of Triton's rate-limiter resources, and Triton's two refusals of
a load: an explicit `--rate-limit-resource` count below an instance's need, and one resource
named global in one instance group and per device in another. Pure, for both servers: `thaw
serve` checks each load (runtime.scheduling.rate_limit), `thaw up` the models its start would
load, since a replica holds only its own models and so never sees two models' scopes clash.

    requirements(config, group_devices(config))      -> {(0, "R1"): 4, (GLOBAL, "R2"): 2}
    count_refusal(needs, explicit)                    -> 'Resource count for "R1" is limited ...'
    scope_refusal(needs, others)                      -> 'Resource "R2" is present as both ...'
    load_refusal(needs, others, explicit)             -> the first of the two, as a load checks
    start_refusals({name: config}, mode, explicit)    -> {name: reason} in load order (by name)
    contended({name: config})                         -> {name: resource names it shares}

`contended` is what makes a resource's count mean what it means on one tritonserver through
`thaw up`, whose models each run in replicas of their own: the models that name a resource in
common must share their replicas, so one rate limiter counts them all (activator.fleet.sharing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from thawserver.rate_limit_flags import ExplicitResource, RateLimitMode
from tritonconfig.schema import mc

__all__ = [
    "GLOBAL",
    "ResourceKey",
    "contended",
    "count_refusal",
    "explicit_count",
    "group_devices",
    "load_refusal",
    "requirements",
    "scope_refusal",
    "start_refusals",
]

GLOBAL = -1  # the device key of a resource shared by every device (`global: true`)
ResourceKey = tuple[int, str]  # (device id, or GLOBAL; resource name)


def group_devices(config: mc.ModelConfig) -> dict[str, list[int]]:
    """Each instance group's devices as the rate limiter counts them (a CPU group: 0)."""
    return {
        group.name: list(group.gpus) if group.kind == mc.ModelInstanceGroup.KIND_GPU else [0]
        for group in config.instance_group
    }


def requirements(
    config: mc.ModelConfig, devices: Mapping[str, Iterable[int]]
) -> dict[ResourceKey, int]:
    """The most of each resource one instance of `config` asks for, per device: `devices`
    maps each instance group's name to the device ids its instances run on (0 for a CPU
    instance, as Triton counts them)."""
    needs: dict[ResourceKey, int] = {}
    for group in config.instance_group:
        for resource in group.rate_limiter.resources:
            shared = getattr(resource, "global")
            for device in {GLOBAL} if shared else set(devices.get(group.name, ())) or {0}:
                key = (device, resource.name)
                needs[key] = max(needs.get(key, 0), resource.count)
    return needs


def explicit_count(explicit: Sequence[ExplicitResource], name: str, device: int) -> int | None:
    """The count `--rate-limit-resource` gives `name` on `device` (a global resource: any
    device's); None when the flag was not given at all. Once it is given, a resource it does
    not name has 0, and of a device's own count and the every-device count the larger holds
    (Triton's ParseAndValidateExplicitResources)."""
    if not explicit:
        return None
    return max(
        (
            r.count
            for r in explicit
            if r.name == name and (device == GLOBAL or r.device in (None, device))
        ),
        default=0,
    )


def count_refusal(
    needs: Mapping[ResourceKey, int], explicit: Sequence[ExplicitResource]
) -> str | None:
    """Triton's refusal of a load one of whose instances needs more of a resource than
    `--rate-limit-resource` gives it; None when every need is covered."""
    for (device, name), count in sorted(needs.items()):
        limit = explicit_count(explicit, name, device)
        if limit is not None and limit < count:
            return (
                f'Resource count for "{name}" is limited to {limit} which will prevent '
                "scheduling of one or more model instances, the minimum required count is "
                f"{count}"
            )
    return None


def scope_refusal(
    needs: Mapping[ResourceKey, int], others: Iterable[Mapping[ResourceKey, int]]
) -> str | None:
    """Triton's refusal of a resource global in one instance group (of `needs`, or of a model
    loaded already: `others`) and per device in another: one name, one scope."""
    scopes: dict[str, set[bool]] = {}
    for each in (*others, needs):
        for device, name in each:
            scopes.setdefault(name, set()).add(device == GLOBAL)
    for name, kinds in sorted(scopes.items()):
        if len(kinds) == 2:
            return (
                f'Resource "{name}" is present as both global and device-specific resource '
                "in the model configuration."
            )
    return None


def load_refusal(
    needs: Mapping[ResourceKey, int],
    others: Iterable[Mapping[ResourceKey, int]],
    explicit: Sequence[ExplicitResource],
) -> str | None:
    """Triton's refusal of a load that needs `needs`, beside the models that claim `others`,
    under the explicit counts: the scopes first, then the counts, as Triton checks them."""
    return scope_refusal(needs, others) or count_refusal(needs, explicit)


def start_refusals(
    configs: Mapping[str, mc.ModelConfig],
    mode: RateLimitMode,
    explicit: Sequence[ExplicitResource],
) -> dict[str, str]:
    """The models of `configs` a start loading them all (by name, one after another) would
    refuse, with Triton's reason; nothing when the rate limiter is off. A refused model claims
    nothing, so the models after it are judged without it."""
    if mode is RateLimitMode.OFF:
        return {}
    refused: dict[str, str] = {}
    loaded: list[dict[ResourceKey, int]] = []
    for name in sorted(configs):
        needs = requirements(configs[name], group_devices(configs[name]))
        reason = load_refusal(needs, loaded, explicit)
        if reason is None:
            loaded.append(needs)
        else:
            refused[name] = reason
    return refused


def contended(configs: Mapping[str, mc.ModelConfig]) -> dict[str, frozenset[str]]:
    """The models of `configs` whose instance groups name a rate-limiter resource that
    another model's also names, each with every resource name its instances ask for (scope
    aside: one name is one resource, as the scope check refuses the clash). A model whose
    resources no other model names is absent: its own replicas count it alone, as one
    tritonserver would."""
    names = {
        model: frozenset(
            resource.name
            for group in config.instance_group
            for resource in group.rate_limiter.resources
        )
        for model, config in configs.items()
    }
    users: dict[str, int] = {}
    for resources in names.values():
        for name in resources:
            users[name] = users.get(name, 0) + 1
    return {
        model: resources
        for model, resources in sorted(names.items())
        if any(users[name] > 1 for name in resources)
    }
