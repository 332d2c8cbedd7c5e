"""jobs.measures.check: each admin action's outcome in the final state (`check_actions`)."""
from __future__ import annotations

import pytest

from jobs.measures import check
from jobs.measures.rundir import ActionKind, ActionRecord, FinalState, PartitionLeadership, TopicFinal


def action(kind: str, topic: str = "a", at: float = 0.0, **fields) -> ActionRecord:
    return ActionRecord(action_id=int(at) + 1, kind=ActionKind(kind), topic=topic, started_ms=at, done_ms=at, **fields)


def final_with(topics: dict[str, TopicFinal], leaders: dict[str, int] | None = None,
               assignments: dict[str, list[int]] | None = None, **fields) -> FinalState:
    zookeeper = {tp: PartitionLeadership(leader=leader, leader_epoch=1, isr=[1, 2, 3] if leader >= 0 else [])
                 for tp, leader in (leaders or {}).items()}
    return FinalState(ts_ms=0, live_brokers=[1, 2, 3], zookeeper=zookeeper, caches={}, assignments=assignments or {},
                      topics=topics, **fields)


ONLINE = final_with({"a": TopicFinal(partitions=2, config={"retention.ms": "5"})}, {"a-0": 1, "a-1": 2},
                    {"a-0": [1, 2, 3], "a-1": [2, 3, 1]})


@pytest.mark.parametrize("actions, final, expected", [
    pytest.param([action("create-topic", partitions=2)], ONLINE, [], id="created-and-online"),
    pytest.param([action("create-topic", partitions=3)], ONLINE, ["a: 2 partitions, not 3"], id="fewer-partitions"),
    pytest.param([action("create-topic", partitions=2)],
                 final_with({"a": TopicFinal(partitions=2)}, {"a-0": 1, "a-1": -1}),
                 ["a: partitions [1] without a leader"], id="a-partition-without-leader"),
    pytest.param([action("create-topic", partitions=2)], final_with({}), ["create-topic a: not in ZooKeeper"],
                 id="created-but-absent"),
    pytest.param([action("create-topic", partitions=1), action("add-partitions", at=1, partitions=2)], ONLINE, [],
                 id="grown"),
    pytest.param([action("create-topic", partitions=2), action("delete-topic", at=1)],
                 final_with({}, on_disk={1: ["load-0"], 2: [], 3: ["load-0"]}), [], id="deleted-everywhere"),
    pytest.param([action("create-topic", partitions=2), action("delete-topic", at=1)],
                 final_with({"a": TopicFinal(partitions=2, marked_for_deletion=True)}),
                 ["delete-topic a: still in ZooKeeper (marked for deletion)"], id="deletion-stuck"),
    pytest.param([action("create-topic", partitions=2), action("delete-topic", at=1)],
                 final_with({}, on_disk={1: [], 2: ["a-1"], 3: ["a-0", "ab-0"]}),
                 ["delete-topic a: logs left on brokers [2, 3]"], id="logs-left"),
    pytest.param([action("create-topic", partitions=9), action("delete-topic", at=1),
                  action("create-topic", at=2, partitions=2)], ONLINE, [], id="deleted-and-made-again"),
    pytest.param([action("create-topic", partitions=2), action("reassign-partitions", at=1, replicas={1: [2, 3, 1]})],
                 ONLINE, [], id="reassigned"),
    pytest.param([action("create-topic", partitions=2), action("reassign-partitions", at=1, replicas={1: [3, 2, 1]})],
                 ONLINE, ["reassign-partitions a: a-1 has replicas [2, 3, 1], not [3, 2, 1]"], id="not-reassigned"),
    pytest.param([action("create-topic", partitions=2), action("reassign-partitions", at=1, replicas={1: [2, 3, 1]})],
                 final_with(ONLINE.topics, {"a-0": 1, "a-1": 2}, ONLINE.assignments, reassigning=["a-1"]),
                 ["reassign-partitions a: a-1 still reassigning (replicas [2, 3, 1], target [2, 3, 1])"],
                 id="still-reassigning"),
    pytest.param([action("create-topic", partitions=2), action("preferred-election", at=1)],
                 final_with(ONLINE.topics, {"a-0": 1, "a-1": 2}, preferred_election_pending=True),
                 ["preferred-election a: /admin/preferred_replica_election was not taken up"], id="election-pending"),
    pytest.param([action("create-topic", partitions=2, config={"retention.ms": "9"}),
                  action("alter-config", at=1, config={"retention.ms": "5"})], ONLINE, [], id="config-altered"),
    pytest.param([action("create-topic", partitions=2), action("unclean-election", at=1,
                                                               config={"unclean.leader.election.enable": "true"})],
                 ONLINE, ["a: configs {'unclean.leader.election.enable': None}, not "
                          "{unclean.leader.election.enable: true}"], id="config-not-in-force"),
    pytest.param([action("create-topic", partitions=2), action("delete-topic", at=1, error="TopicExistsException: x")],
                 ONLINE, ["delete-topic a: refused: TopicExistsException: x"], id="refused"),
    pytest.param([action("create-topic", partitions=2), action("reassign-partitions", at=1, replicas={1: [3, 2, 1]}),
                  action("delete-topic", at=2), action("create-topic", at=3, partitions=2)], ONLINE, [],
                 id="reassigned-then-made-again"),
    pytest.param([action("create-topic", partitions=2)], ONLINE, ["actions [2, 3] of the schedule have no record"],
                 id="actions-without-a-record"),
])
def test_each_admin_actions_outcome_is_checked_in_the_final_state(actions, final, expected):
    v = check.check_actions(actions, final, asked=3 if expected and "no record" in expected[0] else len(actions))
    assert v.examples == expected and v.count == len(expected)
