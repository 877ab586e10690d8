"""The local Ray instance that `--ray` without an address starts, reachable
from this machine only.

Ray's servers (GCS, raylet, every worker's and the driver's gRPC port, the
agents) bind every interface unless the node's address is the loopback
one, and Ray asks for no credentials by default before 2.59 (anyone who can
reach them can run code here). `ray.init(_node_ip_address="127.0.0.1")`
alone is not enough on Linux: Ray swaps a loopback address for the host's
own (`services.resolve_ip_for_localhost`) unless its cluster mode is off
(`ray_constants.ENABLE_RAY_CLUSTER`, the `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`
switch, read when Ray is imported). So the instance is started with cluster
mode off for the length of `ray.init`, and checked afterwards: a node that
is not on 127.0.0.1 is shut down and the run refused, never used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from specreplay.errors import ConfigError

LOOPBACK = "127.0.0.1"

#: What `ray.init` is given for a local instance besides the caller's options:
#: the node on loopback, and no dashboard (its HTTP server runs jobs).
LOCAL_INIT: dict[str, Any] = {"_node_ip_address": LOOPBACK, "include_dashboard": False}


@contextmanager
def _cluster_mode_off(ray: Any) -> Iterator[None]:
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is None or not hasattr(constants, "ENABLE_RAY_CLUSTER"):
        yield  # another Ray: the check after init decides
        return
    before = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = before


def init_local(ray: Any, **options: Any) -> None:
    """Starts a new local Ray instance on 127.0.0.1 only; ConfigError (and no
    instance left running) if Ray put it anywhere else."""
    with _cluster_mode_off(ray):
        ray.init(address="local", **options, **LOCAL_INIT)
    addresses = {str(node.get("NodeManagerAddress")) for node in ray.nodes() if node.get("Alive", True)}
    if addresses != {LOOPBACK}:
        ray.shutdown()
        raise ConfigError(
            f"--ray: the local Ray instance came up on {', '.join(sorted(addresses))}, not only {LOOPBACK}: "
            "refusing to run with Ray's ports open to the network (start a cluster yourself, secured as "
            "docs/distributed.md says, and pass its address)"
        )
