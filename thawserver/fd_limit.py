"""The process's open-file limit: raised to its hard limit at start-up, and what it leaves for
connections.

Every connection is a file descriptor; a soft limit of 1024 (a common default) would refuse
the 1025th file long before `max_connections`. Both servers raise the soft limit to the hard
one (no privilege needed) before they listen, and log both; `connection_room` is how many
connections that leaves once the server's other files are set aside.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from dataclasses import dataclass

from thawserver.connection_limits import ConnectionLimits

__all__ = ["FD_RESERVE", "FdLimit", "bounded_by_fd_limit", "connection_room", "raise_fd_limit"]

logger = logging.getLogger(__name__)

# Descriptors kept for everything but client connections: model files, replicas' pipes and
# sockets, the upstream connections a proxied request opens, logs, epoll.
FD_RESERVE = 512


@dataclass(frozen=True)
class FdLimit:
    """RLIMIT_NOFILE before and after start-up (`soft` is what applies)."""

    soft_before: int
    soft: int
    hard: int


def raise_fd_limit() -> FdLimit:
    """Raise this process's soft open-file limit to its hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    raised = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            raised = target
        except (ValueError, OSError) as exc:  # a hard limit the kernel caps lower (nr_open)
            logger.warning("open-file limit stays %d: cannot raise it to %d: %s", soft, target, exc)
    if raised != soft:
        logger.info("open-file limit raised from %d to %d (hard limit %d)", soft, raised, hard)
    else:
        logger.info("open-file limit %d (hard limit %d)", soft, hard)
    return FdLimit(soft_before=soft, soft=raised, hard=hard)


def connection_room(limit: FdLimit, listeners: int = 1) -> int:
    """Connections the soft limit leaves for each of `listeners` listeners, after FD_RESERVE."""
    if limit.soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(1, (limit.soft - FD_RESERVE) // max(1, listeners))


def bounded_by_fd_limit(
    limits: ConnectionLimits, *, explicit: bool, listeners: int = 1, per_connection: int = 1
) -> ConnectionLimits:
    """`limits` once the open-file limit is raised to its hard limit (children inherit it): a
    connection cap the limit cannot hold, with `listeners` ports at their caps at once and
    `per_connection` descriptors each, is lowered to what it can hold, so that the cap answers
    503 before accept runs out of files. Logged as a warning when the cap was `explicit` (a
    flag), else as what the default became."""
    room = connection_room(raise_fd_limit(), listeners=listeners) // max(1, per_connection)
    cap = limits.max_connections
    if not cap or cap <= room:
        return limits
    log = logger.warning if explicit else logger.info
    log("connection cap %d per port: what the open-file limit leaves (not %d)", room, cap)
    return dataclasses.replace(limits, max_connections=room)
