"""The `thaw up --scaler kubernetes` flags and the `KubernetesConfig` built from them.

In a pod (the Helm chart's activator Deployment) the defaults come from the environment the
chart sets: `POD_NAME` (the activator's id in the Lease), `POD_IP` (where peers reach it),
`POD_NAMESPACE`, and `KUBERNETES_SERVICE_HOST` (present in every pod: in-cluster auth).
Outside a cluster the API is reached through a kubeconfig file.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from activator.errors import ConfigError
from activator.process.shared_cli import shared_settings
from activator.scaler.kube_config import (
    DEFAULT_CLASS,
    KubernetesConfig,
    parse_pool_class,
    parse_selector,
)
from activator.scaler.kubernetes.model_labels import is_label_value
from thawserver.ranges import out_of_range

__all__ = ["add_kubernetes_arguments", "kubernetes_config", "placement"]


def add_kubernetes_arguments(parser: argparse.ArgumentParser) -> None:
    k = parser.add_argument_group("kubernetes scaler (--scaler kubernetes)")
    k.add_argument("--namespace", default=None, help="Thaw's namespace (default $POD_NAMESPACE)")
    k.add_argument(
        "--pool-deployment",
        default="thaw-pool",
        help="the warm pool's Deployment of generic runtime pods (default thaw-pool)",
    )
    k.add_argument(
        "--pool-selector",
        default="thaw.dev/pool=thaw-pool",
        help="its selector, key=value[,key=value]; a claim removes these labels from a pod "
        "(default thaw.dev/pool=thaw-pool)",
    )
    k.add_argument(
        "--pool-class",
        action="append",
        default=[],
        metavar="NAME=DEPLOYMENT",
        help="a placement class and its warm pool, the Deployment DEPLOYMENT selecting "
        "thaw.dev/pool=DEPLOYMENT (repeatable); a model with `thaw.placement_class` = NAME "
        "claims only that pool's pods. --pool-deployment/--pool-selector are the class "
        "`default`",
    )
    k.add_argument(
        "--fleet",
        default="thaw",
        help="label value (thaw.dev/fleet) marking this install's model pods (default thaw)",
    )
    k.add_argument("--kubeconfig", type=Path, default=None, help="kubeconfig file")
    k.add_argument("--kube-context", default=None, help="kubeconfig context")
    k.add_argument(
        "--in-cluster",
        choices=["auto", "on", "off"],
        default="auto",
        help="use the pod's service account (auto: when $KUBERNETES_SERVICE_HOST is set)",
    )
    k.add_argument("--activator-id", default=None, help="id in the Lease (default $POD_NAME)")
    k.add_argument(
        "--leader-election",
        choices=["on", "off"],
        default="on",
        help="one activator scales through a Lease (off: this one always scales)",
    )
    k.add_argument(
        "--lease-name",
        default="thaw-activator-leader",
        help="the scaling leader's Lease (default thaw-activator-leader); explicit mode's load "
        "state is kept in the Lease NAME-load-state",
    )
    k.add_argument(
        "--lease-duration-s", type=int, default=15, help="the Lease's duration (default 15)"
    )
    k.add_argument(
        "--peer-host", default="127.0.0.1", help="peer-report listen address (default 127.0.0.1)"
    )
    k.add_argument(
        "--peer-port", type=int, default=8008, help="peer-report port (default 8008; 0: any)"
    )
    k.add_argument(
        "--advertise-address",
        default=None,
        help="where peers reach this activator (default $POD_IP, else --peer-host)",
    )
    k.add_argument(
        "--runtime-port", type=int, default=None, help="runtime port (default: the pod's `http`)"
    )
    k.add_argument(
        "--runtime-grpc-port",
        type=int,
        default=None,
        help="runtime gRPC port, where gRPC calls are forwarded (default: the pod's `grpc` "
        "container port, else 8001)",
    )
    k.add_argument(
        "--orphan-grace-s",
        type=float,
        default=60.0,
        help="a model pod no activator owns is deleted after this long (default 60)",
    )
    k.add_argument(
        "--node-provisioning-timeout-s",
        type=float,
        default=600.0,
        help="how long a model pod no node can take (Pending, Unschedulable) waits for a node "
        "autoscaler (Karpenter) to add one, its requests held meanwhile; the activation "
        "timeout then starts again when it is scheduled (default 600)",
    )


def kubernetes_config(
    args: argparse.Namespace, env: Mapping[str, str], models: tuple[str, ...] = ()
) -> KubernetesConfig:
    """Flags (and the pod's environment) -> KubernetesConfig; ConfigError names the flag."""
    try:
        selector = parse_selector(args.pool_selector)
    except ValueError as exc:
        raise ConfigError(f"`--pool-selector` = {args.pool_selector!r}: {exc}") from None
    for _key, value in selector:
        if not is_label_value(value):
            raise ConfigError(f"`--pool-selector` = {args.pool_selector!r}: bad value {value!r}")
    classes = _pool_classes(args.pool_class, args.pool_deployment)
    if not args.fleet or not is_label_value(args.fleet):
        raise ConfigError(f"`--fleet` = {args.fleet!r}, must be a label value")
    _check("--lease-duration-s", args.lease_duration_s, 1, 3600)
    _check("--peer-port", args.peer_port, 0, 65535)
    _check("--orphan-grace-s", args.orphan_grace_s, 0, 86_400)
    _check("--node-provisioning-timeout-s", args.node_provisioning_timeout_s, 0, 86_400)
    if args.runtime_port is not None:
        _check("--runtime-port", args.runtime_port, 1, 65535)
    if args.runtime_grpc_port is not None:
        _check("--runtime-grpc-port", args.runtime_grpc_port, 1, 65535)
    in_cluster = (
        args.in_cluster == "on"
        if args.in_cluster != "auto"
        else bool(env.get("KUBERNETES_SERVICE_HOST")) and args.kubeconfig is None
    )
    return KubernetesConfig(
        namespace=args.namespace or env.get("POD_NAMESPACE") or "default",
        pool_deployment=args.pool_deployment,
        pool_selector=selector,
        pool_classes=classes,
        fleet=args.fleet,
        kubeconfig=args.kubeconfig,
        kube_context=args.kube_context,
        in_cluster=in_cluster,
        activator_id=args.activator_id or env.get("POD_NAME") or socket.gethostname(),
        models=models,
        runtime_port=args.runtime_port,
        runtime_grpc_port=args.runtime_grpc_port,
        leader_election=args.leader_election == "on",
        lease_name=args.lease_name,
        lease_duration_s=args.lease_duration_s,
        peer_host=args.peer_host,
        peer_port=args.peer_port,
        advertise_host=args.advertise_address or env.get("POD_IP") or None,
        orphan_grace_s=args.orphan_grace_s,
        node_provisioning_timeout_s=args.node_provisioning_timeout_s,
        shared=shared_settings(args),
    )


def _pool_classes(given: list[str], default_deployment: str) -> tuple[tuple[str, str], ...]:
    classes: dict[str, str] = {}
    for text in given:
        try:
            name, deployment = parse_pool_class(text)
        except ValueError as exc:
            raise ConfigError(f"`--pool-class` = {text!r}: {exc}") from None
        if name in classes:
            raise ConfigError(f"`--pool-class` = {text!r}: class {name!r} is given twice")
        if deployment == default_deployment or deployment in classes.values():
            raise ConfigError(
                f"`--pool-class` = {text!r}: Deployment {deployment!r} is another class's "
                "pool already (each class has its own)"
            )
        classes[name] = deployment
    return tuple(classes.items())


def placement(
    config: KubernetesConfig, classes_of: Mapping[str, str]
) -> tuple[KubernetesConfig, dict[str, str]]:
    """`config` with each model's placement class (`classes_of`: model -> its
    `thaw.placement_class`), and the models refused (model -> why) for naming a class that
    no `--pool-class` gives. A `shared` model shares pods of its own class only
    (shared_pods), so a GPU-class model never lands on a CPU pod or the reverse."""
    known = config.classes()
    refused = {
        model: (
            f"`thaw.placement_class` = {name!r} (model {model}): no such placement class; "
            f"the classes are {', '.join(known)} (thaw up --pool-class NAME=DEPLOYMENT)"
        )
        for model, name in sorted(classes_of.items())
        if name not in known
    }
    chosen = tuple(
        (model, name)
        for model, name in sorted(classes_of.items())
        if name != DEFAULT_CLASS and model not in refused
    )
    return replace(config, model_classes=chosen), refused


def _check(flag: str, value: float, low: float, high: float) -> None:
    problem = out_of_range(flag, value, low, high)
    if problem is not None:
        raise ConfigError(problem)
