"""The broker's side of controller requests: epoch checks and local partition roles. No I/O.

Kafka's ReplicaManager.becomeLeaderOrFollower / stopReplicas, without the logs
(which arrive with the data plane): a request from a stale controller epoch, or
meant for an earlier incarnation of this broker, is refused whole; a partition
state is applied only when its leader epoch is newer than the one held.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

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


class LocalReplica(NamedTuple):  # a broker holds one per partition, replaced on each LeaderAndIsr
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int

    def role(self, broker_id: int) -> str:
        return "Leader" if self.leader == broker_id else "Follower"


class ReplicaManager:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self.controller_epoch = 0
        self.replicas: dict[TopicPartition, LocalReplica] = {}

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
        for st in request.partition_states:
            tp = TopicPartition(st.topic, st.partition)
            current = self.replicas.get(tp)
            current_epoch = current.leader_epoch if current else -1
            if st.leader_epoch > current_epoch:
                if self.broker_id not in st.replicas:
                    state_change_log.warning("[Broker id=%d] Ignoring LeaderAndIsr request from controller %d "
                                             "epoch %d for partition %s as itself is not in assigned replica "
                                             "list %s", self.broker_id, request.controller_id,
                                             request.controller_epoch, tp, st.replicas)
                    code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    replica = LocalReplica(st.leader, st.leader_epoch, tuple(st.isr), tuple(st.replicas),
                                           st.zk_version)
                    self.replicas[tp] = replica
                    if debug:
                        state_change_log.debug("[Broker id=%d] %s %s with leader epoch %d, leader %d, ISR %s "
                                               "(controller %d epoch %d)", self.broker_id,
                                               "Became leader of" if replica.role(self.broker_id) == "Leader"
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
            current = self.replicas.get(tp)
            if current is not None and 0 <= p.leader_epoch <= current.leader_epoch:
                code = Errors.FENCED_LEADER_EPOCH  # -1 (no epoch) and -2 (deleting) always stop
            else:
                self.replicas.pop(tp, None)
                code = Errors.NONE
            results.append(PartitionError(tp.topic, tp.partition, int(code)))
        return ControllerResponse(api=request.api, broker_id=self.broker_id, partition_errors=PartitionErrors(results))
