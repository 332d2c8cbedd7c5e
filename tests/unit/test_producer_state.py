"""Idempotent producers' state (Kafka 2.8's ProducerStateManager without transactions): duplicates
answered with their offsets, sequence and epoch checks with Kafka's errors, state rebuilt from the
log and after truncations."""
from __future__ import annotations

import pytest

from actors.broker.log.batches import build, read_header
from actors.broker.log.log import Log
from actors.broker.log.producer_state import BATCHES_KEPT, BatchMetadata, ProducerStateManager
from coordination.errors import Errors, KrayError


def header(n: int, producer_id: int = 7, first_sequence: int = 0, epoch: int = 0):
    return read_header(build([b"x"] * n, producer_id=producer_id, producer_epoch=epoch, first_sequence=first_sequence))


def append(log: Log, state: ProducerStateManager, n: int, producer_id: int = 7, first_sequence: int = 0,
           epoch: int = 0) -> BatchMetadata | None:
    """As a leader does: check, and append unless it is a duplicate."""
    h = header(n, producer_id, first_sequence, epoch)
    duplicate = state.check(h)
    if duplicate is None:
        info = log.append_as_leader(build([b"x"] * n, producer_id=producer_id, producer_epoch=epoch,
                                          first_sequence=first_sequence), 1)
        state.update(info.headers[0])
    return duplicate


@pytest.fixture
def log(tmp_path):
    return Log(tmp_path / "t-0")


def refused(state: ProducerStateManager, h) -> Errors:
    with pytest.raises(KrayError) as e:
        state.check(h)
    return e.value.error


def test_duplicates_of_the_last_five_batches_get_their_offsets_back(log):
    state = ProducerStateManager(log)
    for i in range(7):
        assert append(log, state, 2, first_sequence=2 * i) is None
    assert append(log, state, 2, first_sequence=12) == BatchMetadata(12, 13, 12, 13)  # the newest
    assert append(log, state, 2, first_sequence=4) == BatchMetadata(4, 5, 4, 5)  # the oldest of five kept
    assert len(state.producers[7].batches) == BATCHES_KEPT
    assert refused(state, header(2, first_sequence=2)) == Errors.DUPLICATE_SEQUENCE_NUMBER  # older than the cache
    assert refused(state, header(1, first_sequence=15)) == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER  # a gap
    assert refused(state, header(3, first_sequence=5)) == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlapping
    assert log.log_end_offset == 14


def test_epochs_fence_older_producers_and_a_new_epoch_starts_at_zero(log):
    state = ProducerStateManager(log)
    append(log, state, 3, epoch=1)
    assert refused(state, header(1, first_sequence=3, epoch=0)) == Errors.INVALID_PRODUCER_EPOCH
    assert refused(state, header(1, first_sequence=3, epoch=2)) == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, state, 1, first_sequence=0, epoch=2) is None
    assert state.producers[7].epoch == 2 and len(state.producers[7].batches) == 1


def test_an_unknown_producer_may_start_anywhere_and_plain_batches_are_not_tracked(log):
    state = ProducerStateManager(log)
    assert append(log, state, 2, producer_id=9, first_sequence=41) is None
    assert state.check(read_header(build([b"x"]))) is None
    log.append_as_leader(build([b"x"]), 1)
    assert list(state.producers) == [9]


def test_sequences_wrap_after_int32_max(log):
    state = ProducerStateManager(log)
    append(log, state, 2, first_sequence=2 ** 31 - 2)
    assert append(log, state, 1, first_sequence=0) is None


def test_state_is_rebuilt_from_the_log_on_open(tmp_path, log):
    state = ProducerStateManager(log)
    for pid in (1, 2):
        for i in range(3):
            append(log, state, 2, producer_id=pid, first_sequence=2 * i)
    log.close()
    reopened = ProducerStateManager(Log(tmp_path / "t-0"))
    assert reopened.producers == state.producers and reopened.replayed == 6


def test_a_truncation_replays_from_a_snapshot_to_what_a_full_read_gives(tmp_path, log):
    state = ProducerStateManager(log, snapshot_interval=10)
    for i in range(40):
        append(log, state, 2, producer_id=i % 3, first_sequence=2 * (i // 3))
    assert len(state.snapshots) >= 3
    for cut in (79, 60, 41, 20, 3, 0):
        log.truncate_to(cut)
        state.truncate(log, log.log_end_offset)
        assert state.replayed <= 10  # from the snapshot at or below the cut, not from the start
        assert state.producers == ProducerStateManager(log).producers


def test_truncate_head_forgets_producers_whose_batches_are_gone(log):
    state = ProducerStateManager(log)
    append(log, state, 2, producer_id=1)
    append(log, state, 2, producer_id=2)
    state.truncate_head(2)
    assert list(state.producers) == [2]
