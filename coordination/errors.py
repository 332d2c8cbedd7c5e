"""Kafka's error codes and the exceptions kray raises for them.

Codes are Kafka's wire values (org.apache.kafka.common.protocol.Errors) so that
responses, logs and CLI output read the same as in a Kafka cluster. The exceptions
only a broker's data plane raises (logs, record batches, replicas, producer state)
are in actors/broker/errors.py.
"""
from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class Errors(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100


class KrayError(Exception):
    """An error a user or a peer can cause; carries Kafka's error code."""

    error = Errors.UNKNOWN_SERVER_ERROR

    def __str__(self) -> str:  # "InvalidTopicException: ..." reads like Kafka's CLI
        return f"{type(self).__name__}: {self.args[0] if self.args else self.error.name}"


class InvalidTopicException(KrayError):
    error = Errors.INVALID_TOPIC_EXCEPTION


class InvalidPartitionsException(KrayError):
    error = Errors.INVALID_PARTITIONS


class InvalidReplicationFactorException(KrayError):
    error = Errors.INVALID_REPLICATION_FACTOR


class TopicExistsException(KrayError):
    error = Errors.TOPIC_ALREADY_EXISTS


class InvalidReplicaAssignmentException(KrayError):
    error = Errors.INVALID_REPLICA_ASSIGNMENT


class ReassignmentInProgressException(KrayError):
    error = Errors.REASSIGNMENT_IN_PROGRESS


class UnknownTopicOrPartitionException(KrayError):
    error = Errors.UNKNOWN_TOPIC_OR_PARTITION


class ControllerMovedException(KrayError):
    """A fenced write failed: another controller holds a newer epoch."""

    error = Errors.NOT_CONTROLLER


class InvalidConfigurationException(KrayError):
    error = Errors.INVALID_CONFIG


class MalformedZNodeError(KrayError):
    """A znode's data is not the JSON Kafka writes there; callers report and skip it."""

    error = Errors.CORRUPT_MESSAGE

    def __init__(self, path: str, data: bytes | None, reason: str):
        preview = (data or b"")[:120].decode("utf-8", "replace")
        super().__init__(f"malformed data at {path}: {reason} (data: {preview!r})")
        self.path = path


class PreferredLeaderNotAvailableException(KrayError):
    error = Errors.PREFERRED_LEADER_NOT_AVAILABLE


class EligibleLeadersNotAvailableException(KrayError):
    error = Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE


class NoReassignmentInProgressException(KrayError):
    error = Errors.NO_REASSIGNMENT_IN_PROGRESS


class AdminCommandFailedException(KrayError):
    """A Kafka tool's own refusal (bad options or files) or failure, with the tool's message."""


class ApiError(NamedTuple):
    """One partition's error in the controller's answer to an admin request (Kafka's ApiError)."""

    error: Errors
    message: str

    def exception(self) -> KrayError:
        """The exception Kafka's clients raise for it: its str reads `ElectionNotNeededException: ...`."""
        return next((c for c in _subclasses(KrayError) if vars(c).get("error") == self.error), KrayError)(self.message)


def _subclasses(cls: type) -> list[type]:
    return [d for c in cls.__subclasses__() for d in (c, *_subclasses(c))]


class ZooKeeperServerError(KrayError):
    """The local ZooKeeper server could not be started or reached."""
