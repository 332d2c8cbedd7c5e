"""The admin API a broker serves (KafkaApis' admin requests, with Kafka 2.8's ZkAdminManager): topics
created, deleted and grown, configs described and altered, partitions moved, leaders elected, log dirs
and the cluster described.

Every request goes the way Kafka 2.8's does in ZooKeeper mode, so that a flow behaves the same whoever
started it. CreateTopics, DeleteTopics and CreatePartitions are served only by the active controller's
broker (NOT_CONTROLLER elsewhere): it writes ZooKeeper with the admin functions `kray topics` uses, and
the controller's watches do the rest; the answer waits until this broker's metadata cache shows the
result, or the request's timeout (REQUEST_TIMED_OUT), as Kafka's DelayedCreatePartitions and
DelayedDeleteTopics; a timeout <= 0 answers at once, REQUEST_TIMED_OUT for each topic acted on.
AlterPartitionReassignments, ListPartitionReassignments and ElectLeaders are events in the controller's
inbox, asked of this broker's own candidate, which answers NOT_CONTROLLER unless it is active. Configs
are read and written in ZooKeeper by any broker. ZooKeeper calls run off the event loop.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections import Counter
from functools import partial
from typing import Awaitable, Callable, Iterable

import ray
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from actors.broker.configs import LIST_CONFIGS, ConfigEntry, describe_broker_config, describe_topic_config
from actors.broker.metadata_cache import MetadataCache
from actors.broker.network.network import RequestContext
from actors.config import ClusterConfig
from actors.controller.changes import ElectionType
from coordination import admin, zkdata
from coordination.errors import ApiError, Errors, KrayError, TopicExistsException
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

TOPIC, BROKER = 2, 4  # Kafka's ConfigResource.Type
SET, DELETE, APPEND, SUBTRACT = range(4)  # Kafka's AlterConfigOp.OpType
NO_NUM_PARTITIONS = NO_REPLICATION_FACTOR = -1
ZERO_UUID = uuid.UUID(int=0)


class InvalidRequestException(KrayError):
    error = Errors.INVALID_REQUEST


def api_error(e: Exception) -> ApiError:
    """Kafka's ApiError.fromThrowable: a KrayError's code and message, anything else an unknown error."""
    if isinstance(e, KrayError):
        return ApiError(e.error, e.args[0] if e.args else None)
    log.error("Unexpected error in an admin request", exc_info=e)
    return ApiError(Errors.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}")


def topic_uuid(topic_id: str | None) -> uuid.UUID:
    """A topic id as ZooKeeper keeps it (Kafka's Uuid.toString, URL-safe base64) as the wire's UUID."""
    if not topic_id:
        return ZERO_UUID
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))


def _by_topic(items: Iterable[tuple[TopicPartition, object]]) -> dict[str, list[tuple[int, object]]]:
    out: dict[str, list[tuple[int, object]]] = {}
    for tp, value in sorted(items, key=lambda item: item[0]):
        out.setdefault(tp.topic, []).append((tp.partition, value))
    return out


class MetadataWaits:
    """Kafka's purgatory for topic operations: a request waits until this broker's metadata cache shows
    what it did, or its timeout. On the event loop; `changed` runs after each UpdateMetadata."""

    def __init__(self):
        self._waiting: list[tuple[Callable[[], bool], asyncio.Future]] = []

    def changed(self) -> None:
        waiting, self._waiting = self._waiting, []
        for check, future in waiting:
            if future.done():
                continue
            if check():
                future.set_result(True)
            else:
                self._waiting.append((check, future))

    async def until(self, check: Callable[[], bool], timeout_ms: int) -> bool:
        """Whether `check` held within the timeout."""
        if check():
            return True
        if timeout_ms <= 0:
            return False
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((check, future))
        try:
            return await asyncio.wait_for(future, timeout_ms / 1000)
        except asyncio.TimeoutError:
            return check()


class AdminApis:
    def __init__(self, broker_id: int, zk: KrayZkClient, cache: MetadataCache, config: ClusterConfig,
                 cluster_id: Callable[[], str | None], controller: Callable[[], object],
                 describe_log_dirs: Callable[[set[TopicPartition] | None], list]):
        self.broker_id, self.zk, self.cache, self.config = broker_id, zk, cache, config
        self.cluster_id = cluster_id
        self.controller = controller  # this broker's controller candidate (a new one after a restart)
        self.describe_log_dirs_here = describe_log_dirs
        self.waits = MetadataWaits()
        self.handlers: dict[int, Callable[[RequestContext, object], Awaitable[object]]] = {
            CreateTopicsRequest.API_KEY: self.create_topics, DeleteTopicsRequest.API_KEY: self.delete_topics,
            CreatePartitionsRequest.API_KEY: self.create_partitions,
            DescribeConfigsRequest.API_KEY: self.describe_configs, AlterConfigsRequest.API_KEY: self.alter_configs,
            IncrementalAlterConfigsRequest.API_KEY: self.incremental_alter_configs,
            AlterPartitionReassignmentsRequest.API_KEY: self.alter_partition_reassignments,
            ListPartitionReassignmentsRequest.API_KEY: self.list_partition_reassignments,
            ElectLeadersRequest.API_KEY: self.elect_leaders, DescribeLogDirsRequest.API_KEY: self.describe_log_dirs,
            DescribeClusterRequest.API_KEY: self.describe_cluster}

    # -- plumbing ------------------------------------------------------------

    async def _off_loop(self, fn: Callable, *args):
        """A blocking call (ZooKeeper) on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _ask_controller(self, method: str, *args):
        """This broker's candidate's answer (Kafka's KafkaApis asks its own KafkaController):
        NOT_CONTROLLER when it is not active, or not there (dead, being replaced)."""
        candidate = self.controller()
        if candidate is None:
            return Errors.NOT_CONTROLLER
        try:
            return await asyncio.wrap_future(getattr(candidate, method).remote(*args).future())
        except ray.exceptions.RayActorError:
            return Errors.NOT_CONTROLLER
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, TimeoutError):  # its inbox did not reach the request in time
                return Errors.REQUEST_TIMED_OUT
            raise

    async def _is_controller(self) -> bool:
        answer = await self._ask_controller("is_active")
        return answer is True

    def _has_leaders(self, topic: str, partitions: int) -> bool:
        """Kafka's DelayedCreatePartitions check: every partition in the metadata cache, with a leader."""
        known = self.cache.partitions
        return all((st := known.get(TopicPartition(topic, p))) is not None and st.leader >= 0
                   for p in range(partitions))

    def _topics(self) -> set[str]:
        return {tp.topic for tp in self.cache.partitions}

    async def _timed_out(self, acted_on: set[str], pending: Callable[[], set[str]], timeout_ms: int) -> set[str]:
        """The topics acted on whose result this broker's metadata cache does not show (`pending`) within
        the timeout: Kafka's topic purgatory. A timeout <= 0 is all of them, at once: ZkAdminManager
        answers REQUEST_TIMED_OUT for each without waiting or looking."""
        if timeout_ms <= 0:
            return acted_on
        await self.waits.until(lambda: not pending(), timeout_ms)
        return pending()

    # -- topics --------------------------------------------------------------

    async def create_topics(self, ctx: RequestContext, request) -> CreateTopicsResponse:
        """Kafka's handleCreateTopicsRequest and ZkAdminManager.createTopics; v5+ answers with the new
        topic's partitions, replication factor and configs, v7 with its id."""
        R = CreateTopicsResponse.CreatableTopicResult
        results: list[tuple[object, ApiError | None, dict | None]] = []  # (topic, error, what was made)
        counts = Counter(t.name for t in request.topics)
        active = await self._is_controller()
        for t in request.topics:
            if not active:
                results.append((t, ApiError(Errors.NOT_CONTROLLER, None), None))
            elif counts[t.name] > 1:
                results.append((t, ApiError(Errors.INVALID_REQUEST, "Found multiple entries for this topic."), None))
            else:
                try:
                    results.append((t, None, await self._off_loop(self._create_topic, t, request.validate_only)))
                except Exception as e:
                    results.append((t, api_error(e), None))
        sizes = {t.name: len(m["assignment"]) for t, error, m in results if error is None}
        if sizes and not request.validate_only:
            late = await self._timed_out(set(sizes), lambda: {name for name, n in sizes.items()
                                                              if not self._has_leaders(name, n)}, request.timeout_ms)
            results = [(t, ApiError(Errors.REQUEST_TIMED_OUT, None) if t.name in late else error, m)
                       for t, error, m in results]
        topics = []
        for t, error, m in results:
            topic_id = topic_uuid(m["topic_id"]) if m else ZERO_UUID  # a topic created keeps it, even timed out
            if error is None:
                assignment = m["assignment"]
                topics.append(R(name=t.name, topic_id=topic_id, error_code=0, error_message=None,
                                num_partitions=len(assignment), replication_factor=len(assignment[0]),
                                configs=[R.CreatableTopicConfigs(name=c.name, value=c.value, read_only=c.read_only,
                                                                 config_source=int(c.source), is_sensitive=False)
                                         for c in m["configs"]]))
            else:  # KafkaApis resets the sizes and configs of a topic in error
                topics.append(R(name=t.name, topic_id=topic_id, error_code=int(error.error),
                                error_message=error.message, num_partitions=-1, replication_factor=-1, configs=[]))
        return CreateTopicsResponse(throttle_time_ms=0, topics=topics)

    def _create_topic(self, t, validate_only: bool) -> dict:
        """One topic of a CreateTopics, validated as ZkAdminManager.createTopics does, then written (with
        validate_only not, and no topic id: Kafka answers the zero one)."""
        configs = {c.name: c.value for c in t.configs}
        if nulls := [name for name, value in configs.items() if value is None]:
            raise InvalidRequestException(f"Null value not supported for topic configs: {','.join(nulls)}")
        assignment = None
        if t.assignments:
            if t.num_partitions != NO_NUM_PARTITIONS or t.replication_factor != NO_REPLICATION_FACTOR:
                raise InvalidRequestException("Both numPartitions or replicationFactor and replicasAssignments "
                                              "were set. Both cannot be used at the same time.")
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        partitions = self.config.broker.num_partitions if t.num_partitions == NO_NUM_PARTITIONS else t.num_partitions
        rf = self.config.broker.default_replication_factor if t.replication_factor == NO_REPLICATION_FACTOR \
            else t.replication_factor
        topic_id = None if validate_only else zkdata.new_topic_id()
        made = admin.create_topic(self.zk, t.name, partitions, rf, configs, assignment, validate_only, topic_id)
        if not validate_only:
            log.info("[Admin Manager on Broker %d]: Created topic %s with assignment %s", self.broker_id, t.name, made)
        return {"assignment": made, "topic_id": topic_id,
                "configs": describe_topic_config(configs, self.config.broker, self.config.controller)}

    async def delete_topics(self, ctx: RequestContext, request) -> DeleteTopicsResponse:
        """Kafka's handleDeleteTopicsRequest: topics marked for deletion (v6 may name them by id); the answer
        waits until the metadata cache no longer has them (DelayedDeleteTopics)."""
        R = DeleteTopicsResponse.DeletableTopicResult
        named = [(t.name, t.topic_id) for t in request.topics] if ctx.api_version >= 6 else \
            [(name, None) for name in request.topic_names]
        ids = {}
        if any(i not in (None, ZERO_UUID) for _, i in named):
            ids = {topic_uuid(z.topic_id): name for name, z in
                   (await self._off_loop(lambda: self.zk.get_topic_znodes(self.zk.get_all_topics()))).items()}
        active = await self._is_controller()
        counts = Counter(named)
        results: list[tuple[str | None, uuid.UUID, ApiError | None]] = []
        for name, topic_id in named:
            topic_id = topic_id or ZERO_UUID
            if not active:
                error = ApiError(Errors.NOT_CONTROLLER, None)
            elif not self.config.controller.delete_topic_enable:
                error = ApiError(Errors.TOPIC_DELETION_DISABLED if ctx.api_version >= 3 else Errors.INVALID_REQUEST,
                                 "Topic deletion is disabled.")
            elif counts[(name, topic_id)] > 1:
                error = ApiError(Errors.INVALID_REQUEST, "Duplicate topic in request.")
            elif name is not None and topic_id != ZERO_UUID:
                error = ApiError(Errors.INVALID_REQUEST, "A topic is named by its name or by its id, not both.")
            elif topic_id != ZERO_UUID and topic_id not in ids:
                error = ApiError(Errors.UNKNOWN_TOPIC_ID, None)
            else:
                name = ids.get(topic_id, name)
                error = None if name in self._topics() else ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, None)
            results.append((name, topic_id, error))
        doomed = [name for name, _, error in results if error is None]
        for name in doomed:
            try:
                await self._off_loop(admin.delete_topic, self.zk, name)
            except TopicExistsException:
                pass  # already marked: this request waits for that deletion too, as Kafka's does
            except Exception as e:
                results = [(n, i, api_error(e) if n == name and error is None else error) for n, i, error in results]
        doomed = {name for name, _, error in results if error is None}
        if doomed:
            late = await self._timed_out(doomed, lambda: doomed & self._topics(), request.timeout_ms)
            results = [(n, i, ApiError(Errors.REQUEST_TIMED_OUT, None) if error is None and n in late else error)
                       for n, i, error in results]
        return DeleteTopicsResponse(throttle_time_ms=0, responses=[
            R(name=name, topic_id=topic_id, error_code=int(error.error) if error else 0,
              error_message=error.message if error else None) for name, topic_id, error in results])

    async def create_partitions(self, ctx: RequestContext, request) -> CreatePartitionsResponse:
        """Kafka's handleCreatePartitionsRequest and ZkAdminManager.createPartitions."""
        R = CreatePartitionsResponse.CreatePartitionsTopicResult
        counts = Counter(t.name for t in request.topics)
        active = await self._is_controller()
        results: list[tuple[object, ApiError | None]] = []
        for t in request.topics:
            if not active:
                results.append((t, ApiError(Errors.NOT_CONTROLLER, None)))
            elif counts[t.name] > 1:
                results.append((t, ApiError(Errors.INVALID_REQUEST, "Duplicate topic in request.")))
            else:
                assignment = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
                try:
                    await self._off_loop(partial(admin.add_partitions, self.zk, t.name, t.count, assignment,
                                                 request.validate_only, refuse_reassigning=True))
                    results.append((t, None))
                except Exception as e:
                    results.append((t, api_error(e)))
        grown = {t.name: t.count for t, error in results if error is None}
        if grown and not request.validate_only:
            late = await self._timed_out(set(grown), lambda: {name for name, n in grown.items()
                                                              if not self._has_leaders(name, n)}, request.timeout_ms)
            results = [(t, ApiError(Errors.REQUEST_TIMED_OUT, None) if t.name in late else error)
                       for t, error in results]
        return CreatePartitionsResponse(throttle_time_ms=0, results=[
            R(name=t.name, error_code=int(error.error) if error else 0, error_message=error.message if error else None)
            for t, error in results])

    # -- configs -------------------------------------------------------------

    def _broker_resource(self, name: str) -> None:
        """A broker resource names this broker, or none (the cluster's defaults), as Kafka's ConfigHelper asks."""
        if name == "":
            return
        try:
            broker_id = int(name)
        except ValueError:
            raise InvalidRequestException(f"Broker id must be an integer, but it is: {name}") from None
        if broker_id != self.broker_id:
            raise InvalidRequestException(f"Unexpected broker id, expected {self.broker_id} or empty string, "
                                          f"but received {name}")

    def _described(self, resource_type: int, name: str) -> list[ConfigEntry]:
        if resource_type == TOPIC:
            admin.validate_topic_name(name)
            overrides = admin.topic_config(self.zk, name)
            return describe_topic_config(overrides, self.config.broker, self.config.controller)
        if resource_type == BROKER:
            self._broker_resource(name)
            # the cluster's defaults are dynamic broker configs, which kray has none of
            return describe_broker_config(self.config.broker, self.config.controller) if name else []
        raise InvalidRequestException(f"Unsupported resource type: {resource_type}")

    async def describe_configs(self, ctx: RequestContext, request) -> DescribeConfigsResponse:
        R = DescribeConfigsResponse.DescribeConfigsResult
        C = R.DescribeConfigsResourceResult
        results = []
        for r in request.resources:
            try:
                entries = await self._off_loop(self._described, r.resource_type, r.resource_name)
                error = None
            except Exception as e:
                entries, error = [], api_error(e)
            if r.configuration_keys is not None:
                entries = [e for e in entries if e.name in set(r.configuration_keys)]
            results.append(R(error_code=int(error.error) if error else 0, error_message=error.message if error else None,
                             resource_type=r.resource_type, resource_name=r.resource_name, configs=[
                C(name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source), is_sensitive=False,
                  synonyms=[C.DescribeConfigsSynonym(name=s.name, value=s.value, source=int(s.source))
                            for s in e.synonyms] if request.include_synonyms else [],
                  config_type=int(e.type), documentation=None) for e in entries]))
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    def _alter(self, resource_type: int, name: str, change: Callable[[dict[str, str]], dict[str, str]],
               validate_only: bool) -> None:
        """A resource's configs changed by `change` (from its overrides to the new ones), then written."""
        if resource_type == TOPIC:
            admin.validate_topic_name(name)
            configs = change(admin.topic_config(self.zk, name))
            admin.change_topic_config(self.zk, name, configs, validate_only)
            if not validate_only:
                log.info("[Admin Manager on Broker %d]: Updated the configs of topic %s: %s", self.broker_id, name,
                         configs)
        elif resource_type == BROKER:
            self._broker_resource(name)
            if configs := change({}):
                raise InvalidRequestException(f"Cannot update these configs dynamically: {sorted(configs)}")
        else:
            raise InvalidRequestException(f"Unsupported resource type: {resource_type}")

    async def _alter_each(self, request, response: type, change_of: Callable[[object], Callable[[dict], dict]]):
        """Each resource of an (Incremental)AlterConfigs changed by `change_of(resource)`; the `response`
        class's answer."""
        results = []
        for r in request.resources:
            try:
                await self._off_loop(self._alter, r.resource_type, r.resource_name, change_of(r), request.validate_only)
                error = None
            except Exception as e:
                error = api_error(e)
            results.append(response.AlterConfigsResourceResponse(
                error_code=int(error.error) if error else 0, error_message=error.message if error else None,
                resource_type=r.resource_type, resource_name=r.resource_name))
        return response(throttle_time_ms=0, responses=results)

    async def alter_configs(self, ctx: RequestContext, request) -> AlterConfigsResponse:
        """The resource's overrides replaced by the request's (Kafka's legacy AlterConfigs)."""
        def change_of(r):
            def change(_current: dict[str, str]) -> dict[str, str]:
                configs = {c.name: c.value for c in r.configs}
                if nulls := [name for name, value in configs.items() if value is None]:
                    raise InvalidRequestException(f"Null value not supported for : {','.join(nulls)}")
                return configs
            return change
        return await self._alter_each(request, AlterConfigsResponse, change_of)

    async def incremental_alter_configs(self, ctx: RequestContext, request) -> IncrementalAlterConfigsResponse:
        """Each config set, deleted, or a list config appended to or subtracted from (KIP-339)."""
        def change_of(r):
            def change(current: dict[str, str]) -> dict[str, str]:
                return incremental_change(current, [(c.name, c.config_operation, c.value) for c in r.configs])
            return change
        return await self._alter_each(request, IncrementalAlterConfigsResponse, change_of)

    # -- the controller's ----------------------------------------------------

    async def alter_partition_reassignments(self, ctx: RequestContext, request) -> AlterPartitionReassignmentsResponse:
        R = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
        asked = [((t.name, p.partition_index), p.replicas) for t in request.topics for p in t.partitions]
        answer = await self._ask_controller("alter_partition_reassignments", asked)
        if isinstance(answer, Errors):
            return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=int(answer), error_message=None,
                                                       responses=[])
        return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, responses=[
            R(name=topic, partitions=[R.ReassignablePartitionResponse(
                partition_index=p, error_code=int(e.error) if e else 0, error_message=e.message if e else None)
                for p, e in ps]) for topic, ps in _by_topic(answer.items()).items()])

    async def list_partition_reassignments(self, ctx: RequestContext, request) -> ListPartitionReassignmentsResponse:
        R = ListPartitionReassignmentsResponse.OngoingTopicReassignment
        asked = None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
        answer = await self._ask_controller("list_partition_reassignments", asked)
        if isinstance(answer, Errors):
            return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=int(answer), error_message=None,
                                                      topics=[])
        return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, topics=[
            R(name=topic, partitions=[R.OngoingPartitionReassignment(
                partition_index=p, replicas=list(a.replicas), adding_replicas=list(a.adding),
                removing_replicas=list(a.removing)) for p, a in ps])
            for topic, ps in _by_topic(answer.items()).items()])

    async def elect_leaders(self, ctx: RequestContext, request) -> ElectLeadersResponse:
        """Kafka's handleElectReplicaLeader: the controller elects, then the answer waits until this
        broker's metadata cache shows each elected partition led by the leader the controller elected
        (DelayedElectLeader's expected leaders; a newer leader epoch alone may be another change's, such as
        a reassignment's end). Asked for every partition, those that needed no election are left out."""
        try:
            election = ElectionType(request.election_type)
        except ValueError:
            return ElectLeadersResponse(throttle_time_ms=0, error_code=int(Errors.INVALID_REQUEST),
                                        replica_election_results=[])
        asked = None if request.topic_partitions is None else \
            [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        answer = await self._ask_controller("elect_leaders", asked, election)
        if isinstance(answer, Errors):
            answer = {tp: ApiError(answer, None) for tp in (asked if asked is not None else self.cache.partitions)}
        elected = {tp: leader for tp, leader in answer.items() if not isinstance(leader, ApiError)}

        def moved(tp: TopicPartition) -> bool:
            st = self.cache.partitions.get(tp)
            return st is not None and st.leader == elected[tp]
        if elected and not await self.waits.until(lambda: all(map(moved, elected)), request.timeout_ms):
            answer |= {tp: ApiError(Errors.REQUEST_TIMED_OUT, None) for tp in elected if not moved(tp)}
        if asked is None:
            answer = {tp: e for tp, e in answer.items()
                      if not isinstance(e, ApiError) or e.error != Errors.ELECTION_NOT_NEEDED}
        R = ElectLeadersResponse.ReplicaElectionResult
        return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=[
            R(topic=topic, partition_result=[R.PartitionResult(
                partition_id=p, error_code=int(e.error) if isinstance(e, ApiError) else 0,
                error_message=e.message if isinstance(e, ApiError) else None)
                for p, e in ps]) for topic, ps in _by_topic(answer.items()).items()])

    # -- describing ----------------------------------------------------------

    async def describe_log_dirs(self, ctx: RequestContext, request) -> DescribeLogDirsResponse:
        """Each of this broker's log dirs, with the size of each replica in it (Kafka's
        ReplicaManager.describeLogDirs); a failed one with KAFKA_STORAGE_ERROR."""
        R = DescribeLogDirsResponse.DescribeLogDirsResult
        wanted = None if request.topics is None else \
            {TopicPartition(t.topic, p) for t in request.topics for p in t.partitions}
        results = []
        for log_dir, error, replicas in self.describe_log_dirs_here(wanted):
            results.append(R(error_code=int(error), log_dir=str(log_dir), topics=[
                R.DescribeLogDirsTopic(name=topic, partitions=[R.DescribeLogDirsTopic.DescribeLogDirsPartition(
                    partition_index=p, partition_size=size, offset_lag=lag, is_future_key=False)
                    for p, (size, lag) in ps])
                for topic, ps in _by_topic(replicas.items()).items()]))
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)

    async def describe_cluster(self, ctx: RequestContext, request) -> DescribeClusterResponse:
        """From the metadata cache, each live broker on the listener the request came in on (KIP-700)."""
        snapshot = self.cache.snapshot
        brokers = [(b.id, node) for b in sorted(snapshot.alive_brokers.values(), key=lambda b: b.id)
                   if (node := b.node(ctx.listener)) is not None]
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, cluster_id=self.cluster_id(),
            controller_id=snapshot.controller_id if snapshot.controller_id is not None else -1,
            brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=i, host=n.host, port=n.port, rack=n.rack)
                     for i, n in brokers], cluster_authorized_operations=-2147483648)


def incremental_change(current: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
    """Kafka's prepareIncrementalConfigs: the overrides after SET, DELETE (of a config set or not),
    APPEND and SUBTRACT (list configs only: cleanup.policy and the throttled replicas)."""
    if [name for name, count in Counter(name for name, _, _ in ops).items() if count > 1]:
        raise InvalidRequestException("Error due to duplicate config keys")
    configs = dict(current)
    for name, op, value in ops:
        if op != DELETE and value is None:
            raise InvalidRequestException(f"Null value not supported for : {name}")
        if op == SET:
            configs[name] = value
        elif op == DELETE:
            configs.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if name not in LIST_CONFIGS:
                raise InvalidRequestException(f"Config value append is not allowed for config key: {name}")
            items = [v for v in configs.get(name, "").split(",") if v]
            given = [v for v in value.split(",") if v]
            items = items + [v for v in given if v not in items] if op == APPEND else \
                [v for v in items if v not in given]
            configs[name] = ",".join(items)
        else:
            raise InvalidRequestException(f"Unknown config operation {op} for config key: {name}")
    return configs
