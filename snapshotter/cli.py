"""`thaw snapshot build|push|pull|ls|verify|gc`: the command line over stores and images."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotter.errors import BuildError, ImageRefError, NothingToImage, SnapshotError
from snapshotter.image_ref import ImageRef, check_target, parse_ref, resolve_target
from snapshotter.transfer import DEFAULT_GC_GRACE_S
from thawserver.ranges import out_of_range

if TYPE_CHECKING:
    from snapshotter.stores.base import ImageStore

logger = logging.getLogger(__name__)

NOTHING_TO_IMAGE_EXIT = 3

_EPILOG = """\
store URIs:
  s3://BUCKET[/PREFIX]   S3 with boto3's standard configuration: AWS_ENDPOINT_URL_S3 (or
                         AWS_ENDPOINT_URL), AWS_REGION/AWS_DEFAULT_REGION, and the usual
                         credential chain (env, ~/.aws, instance/pod role)
  DIR | file:///DIR      a directory (the node-local cache has the same layout)
  layout: <root>/images/<model>/<version>/<target>/manifest.json, chunks by sha256
          (<prefix>/chunks/<digest> in S3, <dir>/chunks/<aa>/<digest> on disk)

image references:
  MODEL[:VERSION]        e.g. resnet50:3; without a version, the highest one in the store
  --target               cpu (default), cuda (this machine's GPU) or cuda:sm_NN

exit status: 0 ok, 1 failure (the message names the bad chunk), 2 usage error,
3 nothing to image (build of a model without weight files, e.g. a Python model),
4 pull --source: the image was built from other files than the model's directory
"""


_STALE_EXIT = 4  # `pull --source`: the image was built from other files


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `thaw snapshot ...` to the `thaw` parser."""
    parser = subparsers.add_parser(
        "snapshot",
        help="build, push, pull, list, verify and garbage-collect model images",
        description="Model images: weights laid out as the runtime holds them, in content-"
        "addressed chunks, plus weightless graphs; stored in S3 or a directory.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="snapshot_command", metavar="ACTION")

    def usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)
    _add(sub, "build", _build, "build the image of a Triton model directory into a store")
    _add(sub, "ls", _ls, "list the images in a store")
    _add(sub, "pull", _pull, "copy an image from a store into a node-local cache")
    _add(sub, "push", _push, "copy an image from one store to another")
    _add(sub, "verify", _verify, "re-read every chunk of an image and check its digest")
    _add(sub, "gc", _gc, "delete chunks that no manifest in the store references")


def _add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    fn: Callable[[argparse.Namespace], int],
    help_: str,
) -> None:
    p = sub.add_parser(
        name,
        help=help_,
        description=help_,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=lambda args: _guarded(fn, args))
    if name == "build":
        p.add_argument(
            "model_dir",
            metavar="MODEL_DIR",
            type=Path,
            help="<repo>/<model> (with version subdirectories)",
        )
        p.add_argument("--version", help="version subdirectory (default: the highest)")
        p.add_argument(
            "--chunk-mib", type=int, default=256, help="largest chunk in MiB (default 256)"
        )
        p.add_argument(
            "--ort-optimize",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="store onnxruntime's optimized graph of an ONNX model: faster restores, but "
            "only on hosts with this onnxruntime and CPU features (default: on for a directory "
            "store such as a node cache, off for s3://; use --no-ort-optimize for a directory "
            "you will push to a shared store)",
        )
    if name in ("pull", "push", "verify"):
        p.add_argument("ref", metavar="REF", help="MODEL[:VERSION]")
    if name in ("build", "pull", "push", "verify"):
        p.add_argument(
            "--target",
            default="cpu",
            type=_target_flag,
            help="cpu | cuda | cuda:sm_NN (default cpu)",
        )
    if name == "push":
        p.add_argument("--from", dest="source", required=True, metavar="URI", help="source store")
    if name == "verify":
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--store", metavar="URI", help="verify the image in this store")
        where.add_argument(
            "--cache", metavar="DIR", type=Path, help="verify the image in this node-local cache"
        )
    else:
        p.add_argument(
            "--store", metavar="URI", required=True, help="s3://bucket/prefix or a directory"
        )
    if name == "pull":
        p.add_argument("--cache", metavar="DIR", type=Path, required=True, help="node-local cache")
        p.add_argument(
            "--source",
            metavar="MODEL_DIR",
            type=Path,
            default=None,
            help="the model's directory here: its files' digest is indexed in the cache (the "
            f"first restore then stats them instead of hashing) and checked against the "
            f"image's (exit {_STALE_EXIT} when they differ)",
        )
    if name == "ls":
        p.add_argument("--json", action="store_true", help="one JSON array of the images")
    if name in ("build", "pull"):
        p.add_argument(
            "--host-cache",
            metavar="DIR",
            type=Path,
            default=None,
            help="also keep the image in this host-memory tier (a tmpfs directory), so the "
            "first restore maps it (needs --host-cache-bytes; the image lands in the node cache "
            "first: --store for build, --cache for pull)",
        )
        p.add_argument(
            "--host-cache-bytes",
            metavar="N",
            type=int,
            default=0,
            help="the host-memory tier's byte budget (needed with --host-cache)",
        )
    if name == "gc":
        p.add_argument("--dry-run", action="store_true", help="list what would be deleted")
        p.add_argument(
            "--grace-s",
            type=_grace_seconds,
            default=DEFAULT_GC_GRACE_S,
            metavar="SECONDS",
            help="keep unreferenced chunks written or reused within this many seconds: a "
            "concurrent build or push writes its manifest after its chunks (default %(default)g)",
        )


def _target_flag(text: str) -> str:
    """`--target` as typed, if it has a target's form (`cuda` is resolved at its use)."""
    if text == "cuda":
        return text
    try:
        return check_target(text)
    except ImageRefError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a target: cpu, cuda (this machine's GPU) or cuda:sm_NN"
        ) from None


def _grace_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds >= 0")
    return value


def run(args: argparse.Namespace) -> int:
    """Entry used by `thaw/cli.py` through `set_defaults(func=...)`."""
    return int(args.func(args))


class _UsageError(SnapshotError):
    """Flags the command cannot take as given: exit 2, as argparse's own refusals, before any
    work is done."""


def _guarded(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return fn(args)
    except _UsageError as exc:
        print(f"thaw snapshot {args.snapshot_command}: error: {exc}", file=sys.stderr)
        return 2
    except NothingToImage as exc:
        print(f"thaw snapshot {args.snapshot_command}: nothing to image: {exc}", file=sys.stderr)
        return NOTHING_TO_IMAGE_EXIT
    except SnapshotError as exc:
        print(f"thaw snapshot {args.snapshot_command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


@contextmanager
def _bar(total: int, desc: str) -> Iterator[Callable[[int], None]]:
    from tqdm import tqdm

    # delay=1: a bar appears only for work that takes more than a second.
    with tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=1.0,
        file=sys.stderr,
        leave=False,
    ) as bar:

        def update(nbytes: int) -> None:
            bar.update(nbytes)

        yield update


def _ort_optimize(flag: bool | None, store_uri: str) -> bool:
    """`--ort-optimize` as given, else on only for a directory store (a node-local cache is
    built on the node that restores from it; images for shared stores stay portable)."""
    return flag if flag is not None else "://" not in store_uri or store_uri.startswith("file://")


def _build(args: argparse.Namespace) -> int:
    from snapshotter.image_builder import build_image
    from snapshotter.stores import open_store

    if args.host_cache is not None and "://" in args.store:
        raise _UsageError("`--host-cache` needs a directory `--store` (the node cache)")
    _check_host_tier_flags(args)
    problem = out_of_range("--chunk-mib", args.chunk_mib, 1, 4096)
    if problem is not None:
        raise _UsageError(problem)
    version_dir = _version_dir(args.model_dir, args.version)
    from tqdm import tqdm

    # delay=1: the bar appears only when the build takes more than a second.
    with tqdm(desc=f"building {version_dir}", unit="B", unit_scale=True, unit_divisor=1024,
              delay=1.0, file=sys.stderr, leave=False) as bar:  # fmt: skip

        def progress(nbytes: int, total: int) -> None:
            bar.total = total
            bar.update(nbytes)

        manifest = build_image(
            version_dir,
            open_store(args.store),
            model=args.model_dir.resolve().name,
            version=version_dir.name,
            target=resolve_target(args.target),
            max_chunk_bytes=args.chunk_mib << 20,
            progress=progress,
            ort_optimize=_ort_optimize(args.ort_optimize, args.store),
        )
    size = _size(manifest.weight_bytes)
    checkpoint = (
        f" from {len(manifest.shards)} shards + {len(manifest.files)} files"
        if manifest.shards or manifest.files
        else ""
    )
    print(f"built {manifest.ref}: {len(manifest.tensors)} tensors, {size}{checkpoint} -> "
          f"{args.store}")  # fmt: skip
    _keep_in_host_tier(args, Path(args.store), manifest.ref)
    return 0


def _check_host_tier_flags(args: argparse.Namespace) -> None:
    """`--host-cache` needs `--host-cache-bytes`: checked before a build or pull starts, not
    once its whole image is copied."""
    if args.host_cache is not None and args.host_cache_bytes <= 0:
        raise _UsageError("`--host-cache` needs `--host-cache-bytes` > 0")


def _keep_in_host_tier(args: argparse.Namespace, cache_dir: Path, ref: ImageRef) -> None:
    """With --host-cache, copy the cached image `ref` into the host-memory tier (LRU budget)."""
    if args.host_cache is None:
        return
    if args.host_cache_bytes <= 0:
        raise SnapshotError("`--host-cache` needs `--host-cache-bytes` > 0")
    from snapshotter.restore import ImageLoader

    loader = ImageLoader(None, cache_dir, ref.target, host_cache_dir=args.host_cache,
                         host_max_bytes=args.host_cache_bytes)  # fmt: skip
    kept = loader.keep_in_host_tier(ref)
    print(f"host tier: {ref} {'kept' if kept else 'not kept (too large or already there)'}")


def _version_dir(model_dir: Path, version: str | None) -> Path:
    if not model_dir.is_dir():
        raise BuildError(f"{model_dir} is not a directory")
    if version is not None:
        path = model_dir / version
        if not version.isdigit() or not path.is_dir():
            raise BuildError(f"{model_dir} has no version directory {version!r}")
        return path
    versions = [
        p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0
    ]
    if not versions:
        # A model repository given where one model's directory belongs: say which to give.
        models = sorted(p.name for p in model_dir.iterdir() if (p / "config.pbtxt").is_file())
        hint = (
            f" (a model repository? give one model's directory, e.g. {model_dir / models[0]})"
            if models
            else ""
        )
        raise BuildError(f"{model_dir} has no numeric version directories{hint}")
    return max(versions, key=lambda p: int(p.name))


def _ls(args: argparse.Namespace) -> int:
    from snapshotter.stores import open_store
    from snapshotter.transfer import load_manifest

    store = open_store(args.store)
    root = getattr(store, "root", None)  # a directory store's
    if isinstance(root, Path) and not root.is_dir():
        # No images there, as for a new store; said, since a mistyped path reads the same.
        print(f"thaw snapshot ls: note: store {root} is not a directory: no images there",
              file=sys.stderr)  # fmt: skip
    if args.json:
        rows: list[dict[str, object]] = []
        for ref in store.list_images():
            try:
                m = load_manifest(store, ref)
            except SnapshotError as exc:
                rows.append({"model": ref.model, "version": ref.version, "target": ref.target,
                             "error": str(exc)})  # fmt: skip
                continue
            rows.append({"model": ref.model, "version": ref.version, "target": ref.target,
                         "framework": m.framework, "tensors": len(m.tensors),
                         "weight_bytes": m.weight_bytes, "shards": len(m.shards),
                         "files": sorted(m.files)})  # fmt: skip
        print(json.dumps(rows))
        return 0
    refs = list(store.list_images())  # before the header: a store that fails prints no table
    print(f"{'MODEL':<24} {'VERSION':>7}  {'TARGET':<12} {'FRAMEWORK':<12} {'TENSORS':>7} SIZE")
    for ref in refs:
        try:
            m = load_manifest(store, ref)
        except SnapshotError as exc:
            print(f"{ref.model:<24} {ref.version:>7}  {ref.target:<12} unreadable: {exc}")
            continue
        row = f"{ref.model:<24} {ref.version:>7}  {ref.target:<12} {m.framework:<12}"
        print(f"{row} {len(m.tensors):>7} {_size(m.weight_bytes)}")
    return 0


def _resolve(store_uri: str, ref_text: str, target: str) -> tuple[ImageStore, ImageRef]:
    from snapshotter.stores import open_store
    from snapshotter.transfer import latest_ref

    store = open_store(store_uri)
    model, version = parse_ref(ref_text)
    return store, latest_ref(store, model, version, resolve_target(target))


def _copy(
    src_uri: str,
    dst_uri: str,
    ref_text: str,
    target: str,
    verb: str,
    dst: ImageStore | None = None,
) -> int:
    from snapshotter.stores import open_store
    from snapshotter.transfer import copy_image, entries, load_manifest

    src, ref = _resolve(src_uri, ref_text, target)
    dst = dst or open_store(dst_uri)
    total = sum(e.size for e in entries(load_manifest(src, ref)))
    with _bar(total, f"{verb} {ref}") as progress:
        manifest = copy_image(src, dst, ref, progress)
    print(f"{verb} {manifest.ref}: {_size(total)} -> {dst_uri}")
    from snapshotter.sources.ort_optimize import VERSION_KEY

    if verb == "pushed" and VERSION_KEY in manifest.framework_versions:
        print(
            f"warning: {manifest.ref} carries an onnxruntime graph optimized for "
            f"{manifest.framework_versions[VERSION_KEY]}; other hosts load the model file "
            "instead (build with --no-ort-optimize for a portable image)",
            file=sys.stderr,
        )
    return 0


def _pull(args: argparse.Namespace) -> int:
    """Copy an image into the node cache under its image lock (a restore of the same image
    in another process waits, then reads what was copied, instead of copying it again);
    with --source, index the model files' digest, so the first restore only stats them."""
    from snapshotter.pvc_cache import NodeCache
    from snapshotter.restore import ImageLoader
    from snapshotter.transfer import load_manifest

    _check_host_tier_flags(args)
    store, ref = _resolve(args.store, args.ref, args.target)
    loader = ImageLoader(None, args.cache, ref.target)
    with NodeCache(args.cache).image_lock(ref):
        if args.source is not None:  # first: a restore waiting for the lock then only stats
            version_dir = _version_dir(args.source, ref.version)
            if loader.source_digest(version_dir) != load_manifest(store, ref).source_digest:
                print(
                    f"thaw snapshot pull: error: {ref} was built from other files than "
                    f"{version_dir} (rebuild the image, or pull without --source)",
                    file=sys.stderr,
                )
                return _STALE_EXIT
        # The node cache's own store: no fsync (its verified markers catch a torn write).
        cache = NodeCache(args.cache).store
        code = _copy(args.store, str(args.cache), args.ref, args.target, "pulled", cache)
    _keep_in_host_tier(args, args.cache, ref)
    return code


def _push(args: argparse.Namespace) -> int:
    return _copy(args.source, args.store, args.ref, args.target, "pushed")


def _verify(args: argparse.Namespace) -> int:
    from snapshotter.transfer import entries, load_manifest, verify_image

    store, ref = _resolve(args.store or str(args.cache), args.ref, args.target)
    total = sum(e.size for e in entries(load_manifest(store, ref)))
    with _bar(total, f"verifying {ref}") as progress:
        verify_image(store, ref, progress)
    print(f"ok {ref}: {_size(total)} verified")
    return 0


def _gc(args: argparse.Namespace) -> int:
    import shutil
    import time

    from snapshotter.stores import open_store
    from snapshotter.transfer import delete_garbage, plan_gc, unpacked_garbage

    store = open_store(args.store)
    plan = plan_gc(store, grace_s=args.grace_s, now=time.time())

    def report(digest: str) -> None:
        size = _size(plan.unreferenced[digest])
        print(f"{'would delete' if args.dry_run else 'deleted'} {digest} {size}", flush=True)

    if args.dry_run:
        done = sorted(plan.unreferenced)
        for digest in done:
            report(digest)
    else:
        done = delete_garbage(store, plan, grace_s=args.grace_s, clock=time.time, on_deleted=report)
    root = getattr(store, "root", None)  # a directory store / node cache: unpacked archives too
    for path in unpacked_garbage(root, plan, grace_s=args.grace_s, now=time.time()) if root else []:
        if not args.dry_run:
            shutil.rmtree(path, ignore_errors=True)
        print(f"{'would delete' if args.dry_run else 'deleted'} unpacked {path.name}", flush=True)
    suffix = " (dry run)" if args.dry_run else ""
    nbytes = sum(plan.unreferenced[d] for d in done)
    print(f"{len(done)} unreferenced chunks, {_size(nbytes)}{suffix}")
    if plan.recent or len(done) < len(plan.unreferenced):
        kept = len(plan.recent) + len(plan.unreferenced) - len(done)
        print(f"{kept} unreferenced chunks kept: written or reused in the last {args.grace_s:g}s")
    return 0


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return f"{nbytes} B"
