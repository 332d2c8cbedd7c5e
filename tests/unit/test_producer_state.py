"""Idempotent producers' state: kept by appends, rebuilt from the log, and after a truncation
replayed from a snapshot; always what a full read of the log gives."""
from __future__ import annotations

import random

from actors.broker.log import Log
from actors.broker.producer_state import RUNS_KEPT, ProducerState, add_run, find_run
from actors.broker.records import Record


def test_runs_extend_while_sequences_and_offsets_follow_and_keep_the_last_five():
    runs = add_run([], 0, 4, 100)
    assert add_run(runs, 5, 9, 105) == [(0, 9, 100)]  # follows in both
    assert add_run(runs, 5, 9, 107) == [(0, 4, 100), (5, 9, 107)]  # another producer wrote between
    for i in range(1, 8):
        runs = add_run(runs, 5 * i, 5 * i + 4, 200 + 10 * i)
    assert len(runs) == RUNS_KEPT and runs[-1] == (35, 39, 270)
    assert find_run(runs, 36, 38) == (271, 273) and find_run(runs, 0, 4) is None  # that one left the window


def fill(log: Log, state: ProducerState, rng: random.Random, batches: int) -> None:
    """Three idempotent producers and an anonymous one, interleaved, as a leader appends them."""
    sequences = {1: 0, 2: 0, 3: 0}
    for _ in range(batches):
        producer = rng.choice([1, 2, 3, -1])
        n = rng.randrange(1, 6)
        first = sequences.get(producer, -1)
        batch = [Record(-1, -1, 0, None, b"v", producer, first + i if producer >= 0 else -1) for i in range(n)]
        offsets = log.append_as_leader(batch, leader_epoch=1)
        state.append(producer, batch[0].sequence, batch[-1].sequence, offsets[0])
        if producer >= 0:
            sequences[producer] += n


def test_a_truncation_replays_from_a_snapshot_to_what_a_full_read_gives(tmp_path):
    rng = random.Random(3)
    log = Log(tmp_path / "t-0", segment_bytes=4_000)
    state = ProducerState(log, snapshot_interval=50)
    fill(log, state, rng, 300)
    assert state.runs == ProducerState(log).runs and len(state.snapshots) == 4
    from_snapshots = 0
    for _ in range(12):
        cut = rng.randrange(max(0, log.log_end_offset - 120), log.log_end_offset)
        below = [offset for offset, _ in state.snapshots if offset <= cut]
        log.truncate_to(cut)
        state.truncate(log, cut)
        assert state.runs == ProducerState(log).runs
        assert state.replayed == cut - (below[-1] if below else 0)  # from the latest snapshot below the cut
        from_snapshots += bool(below)
        fill(log, state, rng, rng.randrange(0, 40))
        assert state.runs == ProducerState(log).runs
    assert from_snapshots >= 8


def test_a_cut_below_every_snapshot_reads_the_log_from_its_start(tmp_path):
    log = Log(tmp_path / "t-0")
    state = ProducerState(log, snapshot_interval=20)
    fill(log, state, random.Random(5), 100)
    log.truncate_to(10)
    state.truncate(log, 10)
    assert state.replayed == 10 and state.runs == ProducerState(log).runs


def test_cuts_at_and_just_below_a_snapshot(tmp_path):
    log = Log(tmp_path / "t-0")
    state = ProducerState(log, snapshot_interval=30)
    fill(log, state, random.Random(9), 80)
    at = state.snapshots[-1][0]
    log.truncate_to(at)  # the snapshot at the cut holds exactly what is below it: nothing to replay
    state.truncate(log, at)
    assert state.replayed == 0 and state.runs == ProducerState(log).runs
    log.truncate_to(at - 1)  # below it, that snapshot is too new
    state.truncate(log, at - 1)
    assert state.replayed > 0 and state.runs == ProducerState(log).runs
