"""The controller's requests to this broker's replicas (Kafka's ReplicaManager.becomeLeaderOrFollower
and stopReplicas), each logged to the state change log as Kafka logs it.

A request from a stale controller epoch, or meant for an earlier incarnation of this broker, is
refused whole; a partition state is applied only when its leader epoch is newer than the one held. A
replica in a failed log directory, or whose directory fails as its role changes, answers
KAFKA_STORAGE_ERROR. The ReplicaManager holds the replicas these requests change and takes them as
its base class: they reach it only through the members `ControllerRequests` declares.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Generator

from actors.broker.errors import KafkaStorageException
from actors.broker.events import BrokerEvents
from actors.broker.log.log_dirs import LogDirs
from actors.broker.partition import LeaderAndIsrState, Partition
from actors.protocol import (
    ControllerRequest,
    ControllerResponse,
    LeaderAndIsrRequest,
    PartitionError,
    PartitionErrors,
    PartitionState,
    StopReplicaRequest,
)
from coordination.errors import Errors
from coordination.zkdata import TopicPartition

state_change_log = logging.getLogger("state.change.logger")

UNKNOWN_BROKER_EPOCH = -1
LEADER_AND_ISR_STEP = 1000  # partitions applied a step at most, and
LEADER_AND_ISR_STEP_S = 0.05  # the seconds a step may take: making a new partition's directory and files costs
# 0.1-1.2 ms on this VM's disk, so 1,000 of them held the event loop for up to 1.2 s a step; through the 90,000 of
# a topic's creation the load's produces and replication got a turn that rarely, its ISRs shrank, its waiting
# produces failed and librdkafka's retries timed out (120 s) and bumped its epoch: written twice
# each step's partition states and their results; the response when the steps are done
LeaderAndIsrSteps = Generator[tuple[list[PartitionState], list[PartitionError]], None, ControllerResponse]


def role_name(state, broker_id: int) -> str:
    """"leader" or "follower", as Kafka's state change log says of a LeaderAndIsr partition state."""
    return "leader" if state.leader == broker_id else "follower"


def now_ms() -> int:
    return int(time.time() * 1000)


class ControllerRequests:
    """LeaderAndIsr and StopReplica applied to the replicas, and the epochs every controller request is
    checked against (UpdateMetadata's too). The ReplicaManager's members they use:"""

    broker_id: int
    controller_epoch: int  # the newest accepted: a controller with an older one was deposed
    # the last LeaderAndIsr handled: its partitions, those applied, and its time from the first step to
    # the last (the broker's other requests served between its steps included)
    last_leader_and_isr: dict[str, float]
    events: BrokerEvents
    log_dirs: LogDirs
    partitions: dict[TopicPartition, Partition]
    offline_partitions: set[TopicPartition]
    _loaded: dict[TopicPartition, Partition]
    _get_or_create: Callable[[TopicPartition, bool], Partition]
    _dir_of: Callable[[Partition], Path]
    io_failed: Callable[[Path, str, OSError], KafkaStorageException]
    wake_fetches: Callable[[], None]
    _high_watermark_moved: Callable[[], None]

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
        """A LeaderAndIsr applied whole."""
        steps = self.leader_and_isr_steps(request, broker_epoch, len(request.partition_states) or 1, None)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def leader_and_isr_steps(self, request: LeaderAndIsrRequest, broker_epoch: int,
                             chunk: int = LEADER_AND_ISR_STEP, step_s: float | None = LEADER_AND_ISR_STEP_S
                             ) -> LeaderAndIsrSteps:
        """A LeaderAndIsr applied `chunk` partition states a step at most, and no more than `step_s` seconds
        allow (None: no limit; a step applies one at least), each step giving the states it applied and their
        results; the response at the end. Between steps the broker serves its other requests
        (Kafka's request handlers and fetchers go on while becomeLeaderOrFollower runs): a broker making
        75,000 new partitions in one step kept its fetchers silent for half a minute, and the leaders
        took it out of the ISR of every partition it followed."""
        started = time.monotonic()
        error = self.check_request(request, broker_epoch)
        if error != Errors.NONE:
            return ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error)
        results: list[PartitionError] = []
        debug = state_change_log.isEnabledFor(logging.DEBUG)  # a line per partition only when asked
        states = request.partition_states
        first = 0
        while first < len(states):
            now, step_states = now_ms(), states[first:first + chunk]
            budget = time.monotonic() + step_s if step_s is not None else None
            led: dict[TopicPartition, tuple[int, tuple[int, ...]]] = {}
            followed: dict[TopicPartition, int] = {}
            step_results = []
            for st in step_states:
                step_results.append(self._apply_partition_state(request, st, now, debug, led, followed))
                if budget is not None and time.monotonic() > budget:
                    break
            step_states = step_states[:len(step_results)]
            first += len(step_results)
            results += step_results
            # recorded as each step is applied: what follows it (a group coordinator's loading) may end
            # before the last step does
            self.events.leader_and_isr(request.controller_epoch, led, followed)
            yield step_states, step_results
        counts = {code: 0 for code in (Errors.NONE, Errors.STALE_CONTROLLER_EPOCH, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                       Errors.KAFKA_STORAGE_ERROR)}
        for r in results:
            counts[r.error_code] += 1
        self.wake_fetches()
        self.last_leader_and_isr = {"partitions": len(results), "applied": counts[Errors.NONE],
                                    "ms": round((time.monotonic() - started) * 1000, 1)}
        state_change_log.info("[Broker id=%d] Handled LeaderAndIsr request from controller %d epoch %d for %d "
                              "partitions in %.0f ms: %d applied, %d with a stale leader epoch, %d not assigned "
                              "here, %d in an offline log directory", self.broker_id, request.controller_id,
                              request.controller_epoch, len(results), self.last_leader_and_isr["ms"],
                              *counts.values())
        return ControllerResponse(api=request.api, broker_id=self.broker_id, partition_errors=PartitionErrors(results))

    def _apply_partition_state(self, request: LeaderAndIsrRequest, st: PartitionState, now: int, debug: bool,
                               led: dict[TopicPartition, tuple[int, tuple[int, ...]]],
                               followed: dict[TopicPartition, int]) -> PartitionError:
        """One partition state of a LeaderAndIsr, the partitions that became led or followed noted."""
        tp = TopicPartition(st.topic, st.partition)
        current = self.partitions.get(tp)
        current_epoch = current.state.leader_epoch if current else -1
        if tp in self.offline_partitions:
            state_change_log.warning("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d epoch %d "
                                     "for partition %s as the local replica for the partition is in an offline "
                                     "log directory", self.broker_id, request.controller_id,
                                     request.controller_epoch, tp)
            code = Errors.KAFKA_STORAGE_ERROR
        elif st.leader_epoch > current_epoch:
            if self.broker_id not in st.replicas:
                state_change_log.warning("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d "
                                         "epoch %d for partition %s as itself is not in assigned replica "
                                         "list %s", self.broker_id, request.controller_id,
                                         request.controller_epoch, tp, st.replicas)
                code = Errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                state = LeaderAndIsrState(st.leader, st.leader_epoch, tuple(st.isr), tuple(st.replicas),
                                          st.zk_version, st.controller_epoch)
                try:
                    partition = self._get_or_create(tp, st.is_new)
                    try:
                        if st.leader == self.broker_id:
                            partition.make_leader(state, now)
                        else:
                            partition.make_follower(state)
                    except OSError as e:
                        raise self.io_failed(self._dir_of(partition), f"changing the role of {tp}", e) from None
                except KafkaStorageException as e:
                    state_change_log.error("[Broker id=%d] Skipped the become-%s state change for %s with "
                                           "leader epoch %d since the replica for the partition is offline due "
                                           "to storage error %s", self.broker_id, role_name(st, self.broker_id),
                                           tp, st.leader_epoch, e)
                    self.offline_partitions.add(tp)  # Kafka's markPartitionOffline
                    if (dropped := self.partitions.pop(tp, None)) is not None:
                        dropped.stop()
                    return PartitionError(tp.topic, tp.partition, int(Errors.KAFKA_STORAGE_ERROR))
                if debug:
                    state_change_log.debug("[Broker id=%d] %s %s with leader epoch %d, leader %d, ISR %s "
                                           "(controller %d epoch %d)", self.broker_id,
                                           "Became leader of" if st.leader == self.broker_id
                                           else "Became follower of", tp, st.leader_epoch, st.leader, st.isr,
                                           request.controller_id, request.controller_epoch)
                code = Errors.NONE
                if st.leader == self.broker_id:
                    led[tp] = (st.leader_epoch, tuple(st.isr))
                else:
                    followed[tp] = st.leader_epoch
        else:
            if debug:
                state_change_log.debug("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d epoch "
                                       "%d for partition %s since its associated leader epoch %d is not higher "
                                       "than the current leader epoch %d", self.broker_id,
                                       request.controller_id, request.controller_epoch, tp, st.leader_epoch,
                                       current_epoch)
            code = Errors.STALE_CONTROLLER_EPOCH
        return PartitionError(tp.topic, tp.partition, int(code))

    def stop_replicas(self, request: StopReplicaRequest, broker_epoch: int) -> ControllerResponse:
        error = self.check_request(request, broker_epoch)
        if error != Errors.NONE:
            return ControllerResponse(api=request.api, broker_id=self.broker_id, error_code=error)
        results = []
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            current = self.partitions.get(tp)
            if tp in self.offline_partitions:
                code = Errors.KAFKA_STORAGE_ERROR  # in a failed log dir: cannot be deleted (Kafka's)
            elif current is not None and 0 <= p.leader_epoch <= current.state.leader_epoch:
                code = Errors.FENCED_LEADER_EPOCH  # -1 (no epoch) and -2 (deleting) always stop
            else:
                stopped = self.partitions.pop(tp, None)
                loaded = self._loaded.pop(tp, None)  # opened at start, never named by a LeaderAndIsr
                log = stopped.log if stopped is not None else loaded.log if loaded is not None else None
                code = Errors.NONE
                if stopped is not None:
                    stopped.stop()  # waiting produces give up; fetchers leave it alone
                if log is not None:
                    try:
                        if p.delete_partition:
                            log.delete()
                        else:
                            log.close()
                    except OSError as e:
                        self.io_failed(log.dir.parent, f"stopping the replica of {tp}", e)
                        self.offline_partitions.add(tp)
                        code = Errors.KAFKA_STORAGE_ERROR
                if log is not None and p.delete_partition and code == Errors.NONE:
                    self.log_dirs.forget(tp)  # its log is gone (one not opened here is left where it is)
            results.append(PartitionError(tp.topic, tp.partition, int(code)))
        self.wake_fetches()
        self._high_watermark_moved()  # a replica opened at start and stopped leaves the checkpoint too
        return ControllerResponse(api=request.api, broker_id=self.broker_id, partition_errors=PartitionErrors(results))

