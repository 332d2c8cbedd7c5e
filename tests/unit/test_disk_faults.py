"""Disk faults planned and applied on real log files, and what the log's recovery makes of them: the
log ends where the plan says the damage starts."""
from __future__ import annotations

import random
import shutil
import subprocess
import time

import pytest

from actors.broker.log.batches import build
from actors.broker.log.checkpoints import write_checkpoint
from actors.broker.log.log import RECOVERY_POINT_CHECKPOINT, Log
from coordination.errors import KrayError
from jobs.experiments import disk_faults
from jobs.experiments.disk_faults import Damage, apply, corrupt_tail, describe, plan, truncate_tail, unflushed_tail, whole_batches
from jobs.measures.rundir import FaultKind


def fill(log: Log, n: int, rng: random.Random | None = None) -> None:
    for _ in range(n):
        count = rng.randint(1, 4) if rng else 2
        log.append_as_leader(build([b"r%d" % log.log_end_offset * (rng.randint(1, 20) if rng else 5)] * count), 1)


def records(directory, segment_bytes: int = 300) -> list[tuple[int, bytes]]:
    log = Log(directory, segment_bytes=segment_bytes)
    out = [(h.base_offset, h.size) for h in log.batches()]
    log.close()
    return out


def test_corrupting_the_tail_flips_a_byte_of_the_last_batch_and_recovery_cuts_that_batch(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 12)
    end, last = log.log_end_offset, log.segments[-1]
    position, header = list(whole_batches(last.path))[-1]
    log.close()
    [damage] = corrupt_tail(tmp_path / "t-0")
    assert damage == Damage(last.path, last.size, position + header.size - 1, True, position,
                            (header.base_offset, end))
    before = last.path.read_bytes()
    apply([damage])
    after = last.path.read_bytes()
    assert len(after) == len(before) and [i for i in range(len(before)) if before[i] != after[i]] == [damage.at]
    recovered = Log(tmp_path / "t-0", segment_bytes=300)
    assert recovered.log_end_offset == header.base_offset and "CRC" in recovered.recovery
    assert last.path.stat().st_size == damage.lost_from


def test_truncating_the_tail_tears_the_last_batch_and_recovery_cuts_it(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 12)
    last = log.segments[-1]
    position, header = list(whole_batches(last.path))[-1]
    log.close()
    [damage] = truncate_tail(tmp_path / "t-0")
    assert (damage.at, damage.flip, damage.lost_from, damage.lost_bytes) == \
        (position + header.size // 2, False, position, header.size)
    apply([damage])
    assert last.path.stat().st_size == damage.at
    recovered = Log(tmp_path / "t-0", segment_bytes=300)
    assert recovered.log_end_offset == damage.offsets[0] == header.base_offset
    assert f"truncated at offset {header.base_offset}: {last.path.name}" in recovered.recovery
    assert last.path.stat().st_size == position


def test_the_tail_is_the_last_whole_batch_of_the_newest_segment_holding_one(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 12)
    last = log.segments[-1]
    log.close()
    empty = tmp_path / "t-0" / "00000000000000099999.log"
    empty.touch()  # a newer segment with nothing whole in it ...
    last.path.write_bytes(last.path.read_bytes() + b"\0\0\0")  # ... and a torn header after the last batch
    assert [d.segment for d in corrupt_tail(tmp_path / "t-0")] == [last.path]
    assert [d.segment for d in truncate_tail(tmp_path / "t-0")] == [last.path]
    fresh = Log(tmp_path / "u-0")
    fresh.truncate_fully_and_start_at(70)
    assert corrupt_tail(tmp_path / "u-0") == truncate_tail(tmp_path / "u-0") == [] == plan(
        FaultKind.CORRUPT_LOG_TAIL, tmp_path / "nowhere")


def test_losing_the_unflushed_tail_cuts_every_log_back_to_its_recovery_point(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 12)  # rolled: the recovery point is the active segment's base
    point, active = log.recovery_point, log.segments[-1]
    assert 0 < point < log.log_end_offset
    log.close()
    [damage] = unflushed_tail(tmp_path / "t-0")
    assert damage == Damage(active.path, active.size, 0, False, 0, (point, log.log_end_offset))
    apply([damage])
    recovered = Log(tmp_path / "t-0", segment_bytes=300)
    assert recovered.log_end_offset == point and recovered.recovery is None  # a clean cut between batches
    recovered.flush()
    assert unflushed_tail(tmp_path / "t-0") == []  # flushed: nothing to lose


def test_a_log_flushed_mid_segment_loses_only_what_came_after(tmp_path):
    log = Log(tmp_path / "t-0")
    fill(log, 4)
    log.flush()
    point, position = log.log_end_offset, log.segments[-1].size
    fill(log, 3)
    log.close()
    [damage] = unflushed_tail(tmp_path / "t-0")
    assert (damage.at, damage.lost_from, damage.offsets) == (position, position, (point, log.log_end_offset))
    apply([damage])
    assert Log(tmp_path / "t-0").log_end_offset == point


def test_without_a_recovery_point_nothing_was_flushed_and_every_segment_is_emptied(tmp_path):
    log = Log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 12)
    log.close()
    (tmp_path / "t-0" / RECOVERY_POINT_CHECKPOINT).unlink()
    damages = unflushed_tail(tmp_path / "t-0")
    assert [d.segment for d in damages] == [s.path for s in log.segments] and all(d.at == 0 for d in damages)
    assert sum(d.offsets[1] - d.offsets[0] for d in damages) == log.log_end_offset
    apply(damages)
    assert Log(tmp_path / "t-0", segment_bytes=300).log_end_offset == 0


def test_every_recovery_point_cuts_the_log_to_exactly_that_offset(tmp_path):
    """Exhaustive over a log of random batches in many segments: for each batch boundary as the
    recovery point, the planned cut leaves the log's batches before it, as they were, and no other."""
    rng = random.Random(7)
    original = tmp_path / "original"
    log = Log(original, segment_bytes=250)
    fill(log, 40, rng)
    log.close()
    whole = records(original, 250)
    assert len({s.base_offset for s in log.segments}) > 5
    boundaries = [0] + [base for base, _ in whole[1:]] + [log.log_end_offset]
    for point in boundaries:
        copy = tmp_path / f"at-{point}"
        shutil.copytree(original, copy)
        write_checkpoint(copy / RECOVERY_POINT_CHECKPOINT, [(point,)], fsync=False)
        damages = unflushed_tail(copy)
        assert sum(d.offsets[1] - d.offsets[0] for d in damages) == log.log_end_offset - point
        assert all(d.lost_from == d.at and not d.flip for d in damages)
        apply(damages)
        recovered = Log(copy, segment_bytes=250)
        assert recovered.log_end_offset == point
        assert [(h.base_offset, h.size) for h in recovered.batches()] == [r for r in whole if r[0] < point]
        recovered.close()


def test_a_plan_covers_every_replica_of_a_broker_and_reads_only(tmp_path):
    broker = tmp_path / "broker-1"
    for name in ("orders-0", "orders-1", "audit-3"):
        log = Log(broker / name, segment_bytes=300)
        fill(log, 12 if name != "audit-3" else 0)
        log.close()
    (broker / "replication-offset-checkpoint").write_text("0\n0\n")
    (broker / "stray").mkdir()  # no segments: not a log
    before = {p: p.read_bytes() for p in broker.rglob("*") if p.is_file()}
    damages = {kind: plan(kind, broker) for kind in disk_faults.DISK_FAULTS}
    assert {p: p.read_bytes() for p in broker.rglob("*") if p.is_file()} == before
    assert [d.partition for d in damages[FaultKind.CORRUPT_LOG_TAIL]] == ["orders-0", "orders-1"]
    assert [d.partition for d in damages[FaultKind.TRUNCATE_LOG_TAIL]] == ["orders-0", "orders-1"]
    assert {d.partition for d in damages[FaultKind.LOSE_UNFLUSHED_TAIL]} == {"orders-0", "orders-1"}
    text = describe(damages[FaultKind.CORRUPT_LOG_TAIL])
    lost = sum(d.lost_bytes for d in damages[FaultKind.CORRUPT_LOG_TAIL])
    assert text.startswith(f"2 logs, {lost} bytes, 4 offsets: orders-0 ") and "flipped byte" in text
    assert describe([]) == "0 logs, 0 bytes, 0 offsets"


def test_the_logs_are_damaged_only_once_their_process_is_gone_in_every_log_dir(tmp_path):
    from jobs.experiments.chaos import damage_logs, process_gone

    dirs = [tmp_path / "log-dir-0", tmp_path / "log-dir-1"]
    for i, d in enumerate(dirs):
        log = Log(d / f"t-{i}")
        fill(log, 3)
        log.close()
    before = {p: p.read_bytes() for d in dirs for p in d.rglob("*.log")}
    holder = subprocess.Popen(["sleep", "60"])  # the broker still running
    try:
        assert not process_gone(holder.pid)
        with pytest.raises(KrayError, match="still runs"):
            damage_logs(FaultKind.TRUNCATE_LOG_TAIL, holder.pid, [str(d) for d in dirs], timeout_s=0.2)
        assert {p: p.read_bytes() for p in before} == before  # left alone
        holder.kill()
        while not process_gone(holder.pid):  # a zombie until reaped: gone all the same
            time.sleep(0.01)
        damages = damage_logs(FaultKind.TRUNCATE_LOG_TAIL, holder.pid, [str(d) for d in dirs])
    finally:
        holder.kill()
        holder.wait()
    assert sorted(d.partition for d in damages) == ["t-0", "t-1"]
    assert all(p.stat().st_size < len(data) for p, data in before.items())
