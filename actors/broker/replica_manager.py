"""The broker's replicas: controller requests applied to Partitions and their logs.

Kafka's ReplicaManager.becomeLeaderOrFollower / stopReplicas: a request from a
stale controller epoch, or meant for an earlier incarnation of this broker, is
refused whole; a partition state is applied only when its leader epoch is newer
than the one held. Each replica's log lives under the broker's log directory,
next to the high-watermark checkpoint. No Ray and no ZooKeeper: the broker's
shell starts and stops fetchers for the role changes this returns.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import NamedTuple

from actors.broker.checkpoints import read_checkpoint, write_checkpoint
from actors.broker.log import DEFAULT_SEGMENT_BYTES, Log
from actors.broker.partition import LeaderAndIsrState, Partition

from actors.protocol import (
    ControllerRequest,
    ControllerResponse,
    LeaderAndIsrRequest,
    PartitionError,
    PartitionErrors,
    StopReplicaRequest,
)
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

state_change_log = logging.getLogger("state.change.logger")

UNKNOWN_BROKER_EPOCH = -1


HW_CHECKPOINT = "replication-offset-checkpoint"


def role(state: LeaderAndIsrState, broker_id: int) -> str:
    return "Leader" if state.leader == broker_id else "Follower"


class RoleChanges(NamedTuple):
    """What a LeaderAndIsr or StopReplica changed, for the shell's fetchers."""

    leaders: list[TopicPartition] = []
    followers: dict[TopicPartition, int] = {}  # partition -> its new leader
    stopped: list[TopicPartition] = []


class ReplicaManager:
    def __init__(self, broker_id: int, log_dir: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES):
        self.broker_id = broker_id
        self.controller_epoch = 0
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.partitions: dict[TopicPartition, Partition] = {}
        self._checkpointed = {TopicPartition(t, p): hw for t, p, hw in
                              read_checkpoint(self.log_dir / HW_CHECKPOINT, (str, int, int))}
        self._checkpoint_lock = threading.Lock()

    @property
    def replicas(self) -> dict[TopicPartition, LeaderAndIsrState]:
        return {tp: p.state for tp, p in list(self.partitions.items())}

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def checkpoint_high_watermarks(self) -> None:
        """Kafka's replication-offset-checkpoint: where each replica's HW was, for the next start."""
        with self._checkpoint_lock:
            write_checkpoint(self.log_dir / HW_CHECKPOINT, [(tp.topic, tp.partition, p.high_watermark)
                                                            for tp, p in sorted(list(self.partitions.items()))])

    def _get_or_create(self, tp: TopicPartition) -> Partition:
        if tp not in self.partitions:
            log = Log(self.log_dir / f"{tp.topic}-{tp.partition}", self.segment_bytes)
            if log.recovery:
                state_change_log.warning("[Broker id=%d] Log of %s recovered: %s", self.broker_id, tp, log.recovery)
            self.partitions[tp] = Partition(tp.topic, tp.partition, self.broker_id, log,
                                            self._checkpointed.get(tp, 0))
        return self.partitions[tp]

    def check_request(self, request: ControllerRequest, broker_epoch: int) -> Errors:
        """STALE_BROKER_EPOCH for a request meant for an earlier registration; STALE_CONTROLLER_EPOCH
        for a deposed controller. Accepting a request adopts its controller epoch."""
        if request.broker_epoch != UNKNOWN_BROKER_EPOCH and request.broker_epoch < broker_epoch:
            state_change_log.warning("[Broker id=%d] Received %s with stale broker epoch %d (current %d) from "
                                     "controller %d", self.broker_id, request.api, request.broker_epoch,
                                     broker_epoch, request.controller_id)
            return Errors.STALE_BROKER_EPOCH
        if request.controller_epoch < self.controller_epoch:
            state_change_log.warning("[Broker id=%d] Ignoring %s from controller %d with correlation epoch %d since "
                                     "its controller epoch %d is old. Latest known controller epoch is %d",
                                     self.broker_id, request.api, request.controller_id, request.controller_epoch,
                                     request.controller_epoch, self.controller_epoch)
            return Errors.STALE_CONTROLLER_EPOCH
        self.controller_epoch = request.controller_epoch
        return Errors.NONE

    def become_leader_or_follower(self, request: LeaderAndIsrRequest, broker_epoch: int) -> ControllerResponse:
        error = self.check_request(request, broker_epoch)
        if error != Errors.NONE:
            return ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error)
        results = []
        debug = state_change_log.isEnabledFor(logging.DEBUG)  # a line per partition only when asked
        now_ms = int(time.time() * 1000)
        for st in request.partition_states:
            tp = TopicPartition(st.topic, st.partition)
            current = self.partitions.get(tp)
            current_epoch = current.state.leader_epoch if current else -1
            if st.leader_epoch > current_epoch:
                if self.broker_id not in st.replicas:
                    state_change_log.warning("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d "
                                             "epoch %d for partition %s as itself is not in assigned replica "
                                             "list %s", self.broker_id, request.controller_id,
                                             request.controller_epoch, tp, st.replicas)
                    code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    state = LeaderAndIsrState(st.leader, st.leader_epoch, tuple(st.isr), tuple(st.replicas),
                                              st.zk_version)
                    partition = self._get_or_create(tp)
                    if st.leader == self.broker_id:
                        partition.make_leader(state, now_ms)
                    else:
                        partition.make_follower(state)
                    if debug:
                        state_change_log.debug("[Broker id=%d] %s %s with leader epoch %d, leader %d, ISR %s "
                                               "(controller %d epoch %d)", self.broker_id,
                                               "Became leader of" if st.leader == self.broker_id
                                               else "Became follower of", tp, st.leader_epoch, st.leader, st.isr,
                                               request.controller_id, request.controller_epoch)
                    code = Errors.NONE
            else:
                if debug:
                    state_change_log.debug("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d epoch "
                                           "%d for partition %s since its associated leader epoch %d is not higher "
                                           "than the current leader epoch %d", self.broker_id,
                                           request.controller_id, request.controller_epoch, tp, st.leader_epoch,
                                           current_epoch)
                code = Errors.STALE_CONTROLLER_EPOCH
            results.append(PartitionError(tp.topic, tp.partition, int(code)))
        counts = {code: 0 for code in (Errors.NONE, Errors.STALE_CONTROLLER_EPOCH, Errors.UNKNOWN_TOPIC_OR_PARTITION)}
        for r in results:
            counts[r.error_code] += 1
        state_change_log.info("[Broker id=%d] Handled LeaderAndIsr request from controller %d epoch %d for %d "
                              "partitions: %d applied, %d with a stale leader epoch, %d not assigned here",
                              self.broker_id, request.controller_id, request.controller_epoch, len(results),
                              *counts.values())
        return ControllerResponse(api=request.api, broker_id=self.broker_id, partition_errors=PartitionErrors(results))

    def stop_replicas(self, request: StopReplicaRequest, broker_epoch: int) -> ControllerResponse:
        error = self.check_request(request, broker_epoch)
        if error != Errors.NONE:
            return ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error)
        results = []
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            current = self.partitions.get(tp)
            if current is not None and 0 <= p.leader_epoch <= current.state.leader_epoch:
                code = Errors.FENCED_LEADER_EPOCH  # -1 (no epoch) and -2 (deleting) always stop
            else:
                stopped = self.partitions.pop(tp, None)
                if stopped is not None:
                    stopped.make_follower(stopped.state._replace(leader=-1))  # waiting produce calls give up
                    if p.delete_partition:
                        stopped.log.delete()
                    else:
                        stopped.log.close()
                code = Errors.NONE
            results.append(PartitionError(tp.topic, tp.partition, int(code)))
        return ControllerResponse(api=request.api, broker_id=self.broker_id, partition_errors=PartitionErrors(results))
