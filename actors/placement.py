"""Where brokers run on a multi-node Ray cluster: one broker per node by default when there are
enough nodes (worker nodes first, so that the head keeps ZooKeeper and the driver), or as the
configuration says. Pure: node descriptions in, a broker -> node id map out.

A broker pinned to a node is restarted by Ray on that node, where its log directory is; its
controller candidate and the active controller's RequestSenders are placed beside their creators.
"""
from __future__ import annotations

from typing import Literal, NamedTuple

from coordination.errors import KrayError

Placement = Literal["spread", "any"] | dict[int, str]


class NodeInfo(NamedTuple):
    node_id: str
    address: str  # the node's IP address, as `ray status` and cluster.yaml users know it
    is_head: bool


def place_brokers(broker_ids: list[int], nodes: list[NodeInfo], placement: Placement = "spread") -> dict[int, str | None]:
    """Broker id -> the node id it must run on (None: wherever Ray schedules it).

    "spread": one broker per node, in broker id order over the worker nodes (then the head) sorted by
    address, when there are at least as many nodes as brokers; otherwise Ray's choice for all.
    "any": Ray's choice. A dict names a node (id or address) per broker; brokers it leaves out go
    wherever Ray schedules them, and a node that is not alive is an error.
    """
    if placement == "any":
        return {b: None for b in broker_ids}
    if placement == "spread":
        ordered = sorted(nodes, key=lambda n: (n.is_head, n.address, n.node_id))
        if len(ordered) < len(broker_ids) or len(ordered) < 2:
            return {b: None for b in broker_ids}
        return {b: n.node_id for b, n in zip(sorted(broker_ids), ordered)}
    by_name = {n.node_id: n.node_id for n in nodes} | {n.address: n.node_id for n in nodes}
    unknown = {b: where for b, where in placement.items() if where not in by_name}
    if unknown:
        raise KrayError(f"placement names nodes that are not alive: {unknown} (alive: "
                        f"{sorted(n.address for n in nodes)})")
    return {b: by_name[placement[b]] if b in placement else None for b in broker_ids}
