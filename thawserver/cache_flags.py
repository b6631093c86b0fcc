"""tritonserver's response-cache flags, as `thaw serve` and `thaw up` take them.

    add_cache_arguments(parser)                      --cache-config (repeatable),
                                                     --response-cache-byte-size
    cache_bytes(args.cache_config, args.response_cache_byte_size) -> the local cache's bytes
                                                     (0: no cache); ValueError saying why not

Only Triton's `local` cache and its `size` key exist here. Both spellings at once, or two caches
named, are refused with Triton's texts (qa/L0_response_cache greps them).
"""

from __future__ import annotations

import argparse

__all__ = ["add_cache_arguments", "cache_bytes"]


def add_cache_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument(
        "--cache-config",
        action="append",
        default=[],
        metavar="CACHE,KEY=VALUE",
        help="the response cache, as Triton's flag: `local,size=BYTES` bounds the cache all "
        "models with `response_cache { enable: true }` share (default: no cache)",
    )
    p.add_argument(
        "--response-cache-byte-size",
        type=int,
        default=None,
        metavar="BYTES",
        help="Triton's older spelling of `--cache-config local,size=BYTES`",
    )


def cache_bytes(specs: list[str], legacy_bytes: int | None) -> int:
    """The response cache's size from Triton's `--cache-config <cache>,<key>=<value>` flags
    or `--response-cache-byte-size`; ValueError for anything else."""
    if legacy_bytes is not None and specs:
        raise ValueError(
            "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other."
        )
    names = sorted({spec.partition(",")[0] for spec in specs})
    if len(names) > 1:
        raise ValueError(
            f"multiple cache configurations are not supported ({', '.join(names)}): "
            "give --cache-config for one cache"
        )
    size = legacy_bytes or 0
    for spec in specs:
        cache, _, setting = spec.partition(",")
        key, eq, value = setting.partition("=")
        if cache != "local":
            raise ValueError(f"`cache_config` = {spec!r}: only the 'local' cache is supported")
        if key != "size" or not eq or not value.isdigit():
            raise ValueError(f"`cache_config` = {spec!r}, must be local,size=BYTES")
        size = int(value)
    return size
