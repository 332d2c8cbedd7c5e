"""When the experiment's consumer group counts as settled after a topic is added: not when the members'
assignments merely cover every partition, but when they are what every member's new subscription gives.
The case that broke a run: two members rejoined with the new topic and split it between them while the
third, still on its old subscription, kept its old partitions and rejoined once more just as the
coordinator was killed."""
from __future__ import annotations

from jobs.experiments.runner import group_settled
from coordination.zkdata import TopicPartition

LOAD = [TopicPartition("load", p) for p in range(6)]
LOAD2 = [TopicPartition("load2", p) for p in range(12)]


def keys(topic: str, partitions) -> list[str]:
    return [f"{topic}-{p}" for p in partitions]


def test_every_member_subscribed_splits_every_topic():
    assigned = [keys("load", [0, 1]) + keys("load2", range(4)), keys("load", [2, 3]) + keys("load2", range(4, 8)),
                keys("load", [4, 5]) + keys("load2", range(8, 12))]
    assert group_settled(assigned, LOAD + LOAD2)


def test_a_member_still_on_its_old_subscription_is_not_settled_though_every_partition_is_covered():
    assigned = [keys("load", [0, 1]) + keys("load2", range(6)), keys("load", [2, 3]),
                keys("load", [4, 5]) + keys("load2", range(6, 12))]
    assert not group_settled(assigned, LOAD + LOAD2)


def test_an_uncovered_partition_is_not_settled_and_a_topic_smaller_than_the_group_leaves_members_without_it():
    assert not group_settled([keys("load", [0, 1]), keys("load", [2, 3]), keys("load", [4])], LOAD)
    few = [TopicPartition("small", 0), TopicPartition("small", 1)]
    assert group_settled([keys("load", [0, 1]) + ["small-0"], keys("load", [2, 3]) + ["small-1"], keys("load", [4, 5])],
                         LOAD + few)
    assert group_settled([["my-topic-0"], ["my-topic-1"]], [TopicPartition("my-topic", 0), TopicPartition("my-topic", 1)])
