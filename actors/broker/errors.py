"""The exceptions only a broker's data plane raises: its logs, record batches, replicas and producer
state. They carry Kafka's error codes (coordination/errors.py) into produce and fetch responses."""
from __future__ import annotations

from coordination.errors import Errors, KrayError


class OffsetOutOfRangeException(KrayError):
    error = Errors.OFFSET_OUT_OF_RANGE


class NotLeaderOrFollowerException(KrayError):
    error = Errors.NOT_LEADER_OR_FOLLOWER


class RecordTooLargeException(KrayError):
    error = Errors.MESSAGE_TOO_LARGE


class NotEnoughReplicasException(KrayError):
    error = Errors.NOT_ENOUGH_REPLICAS


class OutOfOrderSequenceException(KrayError):
    error = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceException(KrayError):
    error = Errors.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochException(KrayError):
    error = Errors.INVALID_PRODUCER_EPOCH


class FencedLeaderEpochException(KrayError):
    error = Errors.FENCED_LEADER_EPOCH


class UnknownLeaderEpochException(KrayError):
    error = Errors.UNKNOWN_LEADER_EPOCH


class CorruptRecordException(KrayError):
    error = Errors.CORRUPT_MESSAGE


class InvalidRecordException(KrayError):
    error = Errors.INVALID_RECORD


class UnsupportedCompressionTypeException(KrayError):
    error = Errors.UNSUPPORTED_COMPRESSION_TYPE


class KafkaStorageException(KrayError):
    """A log or checkpoint file on the broker's disk cannot be used as it is."""

    error = Errors.KAFKA_STORAGE_ERROR
