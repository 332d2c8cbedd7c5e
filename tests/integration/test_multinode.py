"""kray on several Ray nodes (ray.cluster_utils.Cluster on this machine, in a process of its own:
tests/integration/multinode.py): brokers one per worker node with their candidates beside them, a
broker restarted by Ray on its node with its log directory, a whole node removed and handled as a
broker failure, and no acknowledged record lost."""
from __future__ import annotations

import json
import subprocess
import sys


def test_brokers_spread_over_nodes_and_a_lost_node_is_a_broker_failure(zk_connect):
    run = subprocess.run([sys.executable, "-m", "tests.integration.multinode", zk_connect], capture_output=True,
                         text=True, timeout=600)
    # The script's own waits check the node's removal: the active controller handles its broker as a
    # broker failure, and leaders and ISRs move off it; it exits non-zero when either does not happen.
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    brokers = {int(b): n for b, n in seen["broker_nodes"].items()}
    assert sorted(brokers.values()) == seen["workers"]  # one broker per worker node, none on the head
    assert {int(b): n for b, n in seen["candidate_nodes"].items()} == brokers  # candidates beside their brokers
    r = seen["restarted"]
    assert r["node_after"] == r["node_before"]  # Ray restarted it on its node, where its log directory is
    assert r["recovered_partitions"] > 0  # and it found its replicas' logs there (all nodes share one disk here)
    assert seen["acked"] > 300 and seen["lost"] == 0
