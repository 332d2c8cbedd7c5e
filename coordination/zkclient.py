"""The typed ZooKeeper client that brokers and controllers share.

- Reads of many znodes go in pipelined MultiRead requests (ZooKeeper 3.6+), a few
  hundred paths each, not one request per znode.
- Controller writes go through `fenced_multi`: ZooKeeper `multi` batches, each
  starting with a check of `/controller_epoch`'s zkVersion, so that a deposed
  controller's batch fails whole (Kafka's ControllerMovedException).
- Malformed znodes are logged and skipped by the bulk readers.
- Every request rides out a lost connection as Kafka's `retryRequestsUntilConnected` does: it waits
  for the reconnect and is sent again, for as long as the session lives (reads: in any session). A
  write whose answer was lost may have landed: a multi that then fails on its own ops is checked
  against the znodes, and counts as done, with the versions it made, when they hold what it wrote.

Create the client inside the process that uses it: kazoo clients do not pickle.

Over 600 lines on purpose: it is Kafka's KafkaZkClient, one typed call per znode kind over one retry,
session and fencing path (`until_connected`, `fenced_multi`); the wire-level pieces (MultiRead, the
fenced multi) are in zkprotocol.py already, and splitting the calls by znode kind would spread that
one path over modules that each need all of it.
"""
from __future__ import annotations

import base64
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, ConnectionClosedError, ConnectionLoss, NodeExistsError, NoNodeError,
                              OperationTimeoutError, SessionExpiredError)
from kazoo.protocol.states import Callback, KeeperState, ZnodeStat
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE
from kazoo.retry import KazooRetry

from coordination import zkdata
from coordination.errors import ControllerMovedException, KrayError, MalformedZNodeError
from coordination.zkdata import TopicPartition
from coordination.zkprotocol import CreateOp, DeleteOp, FencedMulti, MultiRead, SetDataOp, SetWatches, ZkOp

__all__ = ["Attempts", "CreateOp", "DeleteOp", "KrayZkClient", "OpResult", "PartitionStateRecord", "SetDataOp",
           "ZkOp"]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=zkdata.ZNodeModel)
T = TypeVar("T")
MULTI_BATCH = 1000  # ops per ZooKeeper multi; stays well under jute.maxbuffer (1 MB)
STALE_VERSIONS_PER_BATCH = 3  # conditional writes that failed before the rest of a batch is given back
READ_BATCH = 500  # paths per MultiRead
SET_WATCHES_BATCH = 20_000  # paths per SetWatches: about 1 MB
CREDENTIAL_ENV = "KRAY_ZK_CREDENTIAL"  # "user:password": kray's digest identity in ZooKeeper
SECURE_ACL = CREATOR_ALL_ACL + READ_ACL_UNSAFE  # Kafka's zookeeper.set.acl: kray writes, anyone reads


def credential_from_env() -> str | None:
    """kray's ZooKeeper credential as the environment gives it (the one place that reads it)."""
    return os.environ.get(CREDENTIAL_ENV) or None


class Attempts:
    """A request that counts how often it was sent: sent again, an earlier try may have landed with only
    its answer lost, which the caller checks when the retry meets a conflict."""

    def __init__(self, request: Callable[[], T]):
        self.request, self.count = request, 0

    def __call__(self) -> T:
        self.count += 1
        return self.request()

    @property
    def again(self) -> bool:
        return self.count > 1


class NotAttemptedError(BadVersionError):
    """A conditional write not sent: others in its batch had stale versions, so the caller's versions
    are likely stale too. ZooKeeper names one failing op per multi; reading the rest again costs one
    pipelined read instead of a round trip per stale op."""


@dataclass(frozen=True)
class OpResult:
    op: ZkOp
    error: Exception | None = None
    stat: ZnodeStat | None = None  # for SetDataOp


@dataclass(frozen=True)
class PartitionStateRecord:
    """LeaderIsrAndControllerEpoch as read from ZooKeeper, with the znode's version."""

    state: zkdata.PartitionStateZNode
    zk_version: int


def topic_znode_of(path: str, got: tuple[bytes, ZnodeStat] | None) -> zkdata.TopicZNode | None:
    """A topic's znode as read; None when absent or malformed (logged)."""
    try:
        return None if got is None else zkdata.decode(zkdata.TopicZNode, path, got[0])
    except MalformedZNodeError as e:
        log.error("Skipping topic: %s", e)


def partition_state_of(path: str, got: tuple[bytes, ZnodeStat] | None) -> PartitionStateRecord | None:
    """A partition's state znode as read; None when absent or malformed (logged)."""
    try:
        return None if got is None else PartitionStateRecord(zkdata.decode(zkdata.PartitionStateZNode, path, got[0]),
                                                             got[1].version)
    except MalformedZNodeError as e:
        log.error("Skipping partition state: %s", e)


class KrayZkClient:
    """A kazoo session plus Kafka's typed reads and fenced writes."""

    def __init__(self, connect: str, session_timeout_ms: int = 18_000, read_only: bool = False,
                 credential: str | None = None):
        """With a credential ("user:password") the session authenticates with it and creates every
        znode with SECURE_ACL, as Kafka's zookeeper.set.acl does; without one, znodes are open."""
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        if credential is not None and (":" not in credential or credential.startswith(":")):
            raise KrayError(f"a ZooKeeper credential is user:password ({CREDENTIAL_ENV})")
        self.kazoo = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            # reconnect after 10 ms, backing off to 1 s while the server is away: kazoo's default 100 ms,
            # taken twice when a session expired (once to learn it, once for the new session), would be
            # most of the time a broker resumed from a pause serves as a zombie leader
            connection_retry=KazooRetry(max_tries=-1, delay=0.01, max_delay=1.0),
            # kazoo's recipes (the watches) set themselves again after any reconnect; kray's own requests
            # go through until_connected
            command_retry=KazooRetry(max_tries=-1, delay=0.01, max_delay=1.0),
            read_only=read_only,
            auth_data=[("digest", credential)] if credential else None,
            default_acl=SECURE_ACL if credential else None,
        )
        self._state_changed = threading.Condition()
        self.kazoo.add_listener(self._on_state)
        self.lost_answers = 0  # requests sent again after a lost connection (a run's record)
        self._change_lock = threading.Lock()
        self._changes: list[set[str]] = []  # one set per `changed_since` waiting on its answers

    # -- session -------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> "KrayZkClient":
        try:
            self.kazoo.start(timeout=timeout)
        except Exception as e:  # kazoo raises its own timeout type
            self.kazoo.close()
            raise KrayError(f"cannot connect to ZooKeeper at {self.connect}: {e}") from None
        return self

    def close(self) -> None:
        try:
            self.kazoo.stop()
        finally:
            self.kazoo.close()

    def __enter__(self) -> "KrayZkClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def session_id(self) -> int:
        return self.kazoo.client_id[0] if self.kazoo.client_id else 0

    @property
    def last_zxid(self) -> int:
        """The zxid of the last answer this session had: ZooKeeper had applied every change up to it."""
        return self.kazoo.last_zxid

    def add_state_listener(self, listener: Callable[[KazooState], None]) -> None:
        self.kazoo.add_listener(listener)

    # -- riding out a lost connection ------------------------------------------

    def _on_state(self, state: KazooState) -> None:
        """kazoo's connection thread: only wake the requests waiting for a reconnect."""
        with self._state_changed:
            self._state_changed.notify_all()

    def _session(self) -> int:
        """The session kazoo holds, also while disconnected (its `client_id` is None then); 0 after an
        expiry until the next session is made."""
        return self.kazoo._session_id or 0

    def until_connected(self, request: Callable[[], T], same_session: bool = True) -> T:
        """`request()`, sent again after every lost connection once connected again (Kafka's
        retryRequestsUntilConnected). `same_session`: SessionExpiredError if the connection comes back
        with another session (a write: the ephemerals and the role it was made for are gone); a read
        is answered in any session. The caller checks a write that may have landed before the loss."""
        session = self._session()
        if same_session and not session:  # between an expired session and the next: not this write's
            raise SessionExpiredError("no ZooKeeper session: the last one expired")
        while True:
            try:
                return request()
            except (ConnectionLoss, OperationTimeoutError):
                self.lost_answers += 1
                self._await_connected(session if same_session else None)
            except SessionExpiredError as e:  # failed with its session: a read goes on in the next one
                if same_session or isinstance(e, ConnectionClosedError):
                    raise
                self._await_connected(None)

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False) -> str:
        """A create sent until connected. NodeExistsError after it was sent again counts as done when
        the znode holds `data` (and, ephemeral, is this session's): the first try landed, only its
        answer was lost (Kafka treats NODEEXISTS after a retry so). A sequential create sent again may
        make a second znode: only notifications are sequential, and one twice is harmless."""
        send = Attempts(lambda: self.kazoo.create(path, data, ephemeral=ephemeral, sequence=sequence,
                                                  makepath=makepath))
        try:
            return self.until_connected(send)
        except NodeExistsError:
            got = self.get(path) if send.again else None
            if got is None or got[0] != data or (ephemeral and got[1].ephemeralOwner != self.session_id):
                raise
            return path

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """A conditional set sent until connected. BadVersionError after it was sent again counts as
        done when the znode holds `data` at the version after `version`: its stat."""
        send = Attempts(lambda: self.kazoo.set(path, data, version=version))
        try:
            return self.until_connected(send)
        except BadVersionError:
            got = self.get(path) if send.again else None
            if got is None or got[0] != data or got[1].version != version + 1:
                raise
            return got[1]

    def _await_connected(self, session: int | None) -> None:
        with self._state_changed:
            while True:
                if self.kazoo._stopped.is_set() or self.kazoo.client_state in (KeeperState.CLOSED,
                                                                             KeeperState.AUTH_FAILED):
                    raise ConnectionClosedError(f"the ZooKeeper client is {self.kazoo.client_state}")
                current = self._session()
                if session and current and current != session:
                    raise SessionExpiredError(f"ZooKeeper session 0x{session:x} expired while disconnected")
                if self.kazoo.connected:
                    return
                self._state_changed.wait(0.5)

    def ensure_persistent_paths(self) -> None:
        for path in zkdata.PERSISTENT_PATHS:
            self.until_connected(lambda: self.kazoo.ensure_path(path), same_session=False)

    # -- plain reads ---------------------------------------------------------

    def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return self.until_connected(lambda: self.kazoo.get(path), same_session=False)
        except NoNodeError:
            return None

    def exists(self, path: str) -> ZnodeStat | None:
        return self.until_connected(lambda: self.kazoo.exists(path), same_session=False)

    def existing(self, paths: list[str]) -> set[str]:
        """Which of `paths` exist, asked in one pipelined pass."""
        def ask() -> set[str]:
            pending = [(p, self.kazoo.exists_async(p)) for p in paths]
            return {p for p, r in pending if r.get()}
        return self.until_connected(ask, same_session=False)

    def get_znode(self, model: type[M], path: str) -> M | None:
        """The znode's JSON as its model, None when absent; MalformedZNodeError when it is not Kafka's JSON."""
        got = self.get(path)
        return None if got is None else zkdata.decode(model, path, got[0])

    def children(self, path: str) -> list[str]:
        try:
            return self.until_connected(lambda: self.kazoo.get_children(path), same_session=False)
        except NoNodeError:
            return []

    def get_many(self, paths: Iterable[str]) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        """Reads in pipelined MultiReads; missing znodes map to None. Sent again whole when the
        connection drops midway (reads are idempotent)."""
        paths = list(paths)
        return self.until_connected(lambda: self._get_many_once(paths), same_session=False)

    def _get_many_once(self, paths: list[str]) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        root = self.kazoo.chroot
        pending = [self._send(MultiRead(root, tuple(paths[i:i + READ_BATCH])))
                   for i in range(0, len(paths), READ_BATCH)]
        results = [r for batch in pending for r in batch.get()]
        out: dict[str, tuple[bytes, ZnodeStat] | None] = {}
        for path, result in zip(paths, results):
            if isinstance(result, NoNodeError):
                out[path] = None
            elif isinstance(result, Exception):
                raise result
            else:
                out[path] = result
        return out

    def _send(self, request):
        """Queue a wire request on kazoo's connection (as kazoo's own Transaction.commit does)."""
        result = self.kazoo.handler.async_result()
        self.kazoo._call(request, result)
        return result

    # -- controller ----------------------------------------------------------

    def get_controller_id(self) -> int | None:
        znode = self.get_znode(zkdata.ControllerZNode, zkdata.CONTROLLER)
        return None if znode is None else znode.brokerid

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zkVersion of /controller_epoch), or None before the first election."""
        got = self.get(zkdata.CONTROLLER_EPOCH)
        if got is None:
            return None
        return zkdata.decode_controller_epoch(zkdata.CONTROLLER_EPOCH, got[0]), got[1].version

    def register_controller_and_increment_epoch(self, broker_id: int) -> tuple[int, int]:
        """Create ephemeral /controller and bump /controller_epoch in one multi.

        Returns (new epoch, its zkVersion). Raises ControllerMovedException when
        another broker won or the epoch moved under us (Kafka's
        KafkaZkClient.registerControllerAndIncrementControllerEpoch).
        """
        current = self.get_controller_epoch()
        if current is None:
            try:
                self.create(zkdata.CONTROLLER_EPOCH, zkdata.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            current = self.get_controller_epoch()
        epoch, version = current

        def commit() -> list:
            txn = self.kazoo.transaction()
            txn.create(zkdata.CONTROLLER, zkdata.ControllerZNode(brokerid=broker_id).encode(), ephemeral=True)
            txn.set_data(zkdata.CONTROLLER_EPOCH, zkdata.encode_controller_epoch(epoch + 1), version=version)
            return txn.commit()
        results = self.until_connected(commit)
        if not any(isinstance(r, Exception) for r in results):
            return epoch + 1, results[1].version
        # A retried multi may have succeeded already: is the controller us, at that epoch?
        owner = self.get(zkdata.CONTROLLER)
        now = self.get_controller_epoch()
        if owner and owner[1].ephemeralOwner == self.session_id and now and now[0] == epoch + 1:
            return now
        raise ControllerMovedException(f"broker {broker_id} lost the controller election at epoch {epoch + 1}")

    # -- fenced writes -------------------------------------------------------

    def fenced_multi(self, ops: list[ZkOp], epoch_zk_version: int, pipelined: bool = False) -> list[OpResult]:
        """Apply ops in multis of MULTI_BATCH, each fenced by the controller epoch's zkVersion.

        An op that fails on its own (node exists, bad version) is dropped and the
        rest of its batch retried, so one stale partition does not block others;
        its OpResult carries the error. A failed fence raises ControllerMovedException.
        `pipelined` sends every batch before waiting for the first, for callers whose ops
        do not depend on each other (a batch may be retried after later ones applied).
        """
        if pipelined:
            return self.begin_fenced_multi(ops, epoch_zk_version)()
        results: list[OpResult] = []
        for i in range(0, len(ops), MULTI_BATCH):
            batch = list(ops[i:i + MULTI_BATCH])
            results += self._collect_multi(batch, self._send_multi(batch, epoch_zk_version), epoch_zk_version)
        return results

    def begin_fenced_multi(self, ops: list[ZkOp], epoch_zk_version: int, stale_limit: int | None = None,
                           batch_size: int = MULTI_BATCH) -> Callable[[], list[OpResult]]:
        """Send every batch of a pipelined fenced_multi now; the returned function waits for their
        outcome, so that the caller can work while ZooKeeper applies them. With `stale_limit`, a batch
        whose conditional writes failed that many times gives the rest back as NotAttemptedError."""
        batches = [list(ops[i:i + batch_size]) for i in range(0, len(ops), batch_size)]
        in_flight = [self._send_multi(b, epoch_zk_version) for b in batches]
        return lambda: [r for batch, sent in zip(batches, in_flight)
                        for r in self._collect_multi(batch, sent, epoch_zk_version, stale_limit)]

    def _collect_multi(self, batch: list[ZkOp], sent, epoch_zk_version: int,
                       stale_limit: int | None = None) -> list[OpResult]:
        """Wait for one batch; while an op of it fails on its own, record that op and resend the rest."""
        results: list[OpResult] = []
        stale = 0
        session, lost = self._session(), False
        while batch:
            try:
                outcome = sent.get()
            except (ConnectionLoss, OperationTimeoutError):
                self.lost_answers += 1
                self._await_connected(session)
                sent, lost = self._send_multi(batch, epoch_zk_version), True
                continue
            errors = [i for i, r in enumerate(outcome) if isinstance(r, Exception)]
            if not errors:
                results.extend(OpResult(op, stat=r if isinstance(r, ZnodeStat) else None)
                               for op, r in zip(batch, outcome[1:]))
                break
            failed = next((i for i in errors
                           if type(outcome[i]).__name__ not in ("RolledBackError", "RuntimeInconsistency")), None)
            if failed is None:
                raise KrayError(f"ZooKeeper rolled back a multi without naming the failing op: {outcome!r}")
            if failed == 0:
                raise ControllerMovedException(
                    f"controller epoch zkVersion {epoch_zk_version} is stale; another controller was elected")
            if lost and (stats := self._landed(batch, session)) is not None:
                results.extend(OpResult(op, stat=stat) for op, stat in zip(batch, stats))
                break
            lost = False
            results.append(OpResult(batch[failed - 1], error=outcome[failed]))
            del batch[failed - 1]
            stale += isinstance(outcome[failed], BadVersionError)
            if batch and stale_limit is not None and stale >= stale_limit:
                results.extend(OpResult(op, error=NotAttemptedError(f"{stale} stale versions in its batch"))
                               for op in batch)
                break
            if batch:
                sent = self._send_multi(batch, epoch_zk_version)
        return results

    def _landed(self, batch: list[ZkOp], session: int) -> list[ZnodeStat | None] | None:
        """Whether a multi whose answer was lost went through: its ops, sent again, failed (a multi is
        all or nothing, so if it landed the second try fails on its first op), and every znode holds
        what the multi made. The stats its set ops made, or None if it did not land."""
        found = self.get_many(op.path for op in batch)
        stats: list[ZnodeStat | None] = []
        for op in batch:
            got = found[op.path]
            if isinstance(op, DeleteOp):
                done = got is None
            elif isinstance(op, CreateOp):
                done = got is not None and got[0] == op.data and (not op.ephemeral or got[1].ephemeralOwner == session)
            else:
                done = got is not None and got[0] == op.data and op.version in (-1, got[1].version - 1)
            if not done:
                return None
            stats.append(got[1] if isinstance(op, SetDataOp) else None)
        log.info("A multi of %d ops whose answer was lost to a connection loss had gone through", len(batch))
        return stats

    def _send_multi(self, batch: list[ZkOp], epoch_zk_version: int):
        acl = tuple((a.perms, a.id.scheme, a.id.id) for a in (self.kazoo.default_acl or OPEN_ACL_UNSAFE))
        return self._send(FencedMulti(self.kazoo.chroot, zkdata.CONTROLLER_EPOCH, epoch_zk_version, tuple(batch), acl))

    # -- brokers -------------------------------------------------------------

    def register_broker(self, broker_id: int, info: zkdata.BrokerIdZNode) -> int:
        """Create ephemeral /brokers/ids/N; returns the broker epoch (the znode's czxid).

        Raises NodeExistsError when another session still owns the id.
        """
        path = zkdata.broker_path(broker_id)
        try:
            self.create(path, info.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:  # another session's, or ours with other data (an earlier registration)
            got = self.get(path)
            if got is None or got[1].ephemeralOwner != self.session_id:
                raise
        return self.exists(path).czxid

    def delete_broker_registration(self, broker_id: int, broker_epoch: int, epoch_zk_version: int) -> bool:
        """Remove /brokers/ids/N if it is still the registration of that broker epoch (its czxid), fenced
        on the controller epoch; whether it was removed. A newer incarnation's registration stays."""
        path = zkdata.broker_path(broker_id)
        stat = self.exists(path)
        if stat is None or stat.czxid != broker_epoch:
            return False
        (result,) = self.fenced_multi([DeleteOp(path, stat.version)], epoch_zk_version)
        return result.error is None

    def get_or_create_cluster_id(self) -> str:
        """Kafka's getOrGenerateClusterId: the first broker writes a random id, every other reads it."""
        existing = self.get_znode(zkdata.ClusterIdZNode, zkdata.CLUSTER_ID)
        if existing is not None:
            return existing.id
        generated = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        try:
            self.create(zkdata.CLUSTER_ID, zkdata.ClusterIdZNode(id=generated).encode(), makepath=True)
            return generated
        except NodeExistsError:  # another broker was first
            return self.get_znode(zkdata.ClusterIdZNode, zkdata.CLUSTER_ID).id

    def propagate_log_dir_event(self, broker_id: int) -> str:
        """Kafka's propagateLogDirEvent (KIP-112): a sequential /log_dir_event_notification/log_dir_event_N
        saying this broker lost a log directory; the controller's watch picks it up. Its path. (Sent again
        after a lost answer, a second notification of the same event is harmless, as Kafka's.)"""
        return self.create(f"{zkdata.LOG_DIR_EVENT_NOTIFICATION}/{zkdata.LOG_DIR_EVENT_PREFIX}",
                           zkdata.LogDirEventNotificationZNode(broker=broker_id).encode(), sequence=True,
                           makepath=True)

    def bootstrap_servers(self) -> str:
        """"host:port,..." of every registered broker's PLAINTEXT listener (the registration's host and
        port): a Kafka client's bootstrap.servers."""
        brokers = self.get_brokers(self.get_all_broker_ids())
        return ",".join(f"{info.host}:{info.port}" for _, (info, _) in sorted(brokers.items()))

    def get_all_broker_ids(self) -> list[int]:
        return sorted(int(c) for c in self.children(zkdata.BROKER_IDS) if c.isdigit())

    def get_brokers(self, broker_ids: Iterable[int]) -> dict[int, tuple[zkdata.BrokerIdZNode, int]]:
        """Registrations with broker epochs (czxid); malformed ones are logged and skipped."""
        out = {}
        raw = self.get_many(zkdata.broker_path(b) for b in broker_ids)
        for path, got in raw.items():
            if got is None:
                continue
            try:
                out[int(path.rsplit("/", 1)[1])] = (zkdata.decode(zkdata.BrokerIdZNode, path, got[0]), got[1].czxid)
            except MalformedZNodeError as e:
                log.error("Skipping broker registration: %s", e)
        return out

    # -- topics and partitions -----------------------------------------------

    def get_all_topics(self) -> set[str]:
        return set(self.children(zkdata.TOPICS))

    def get_topic_znodes(self, topics: Iterable[str]) -> dict[str, zkdata.TopicZNode]:
        """Topics' assignments; absent ones are left out, malformed ones logged and skipped."""
        raw = self.get_many(zkdata.topic_path(t) for t in topics)
        return {path.rsplit("/", 1)[1]: znode for path, got in raw.items()
                if (znode := topic_znode_of(path, got)) is not None}

    def get_partition_states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionStateRecord]:
        """Typed records of the partitions' state znodes; absent ones are left out, malformed ones
        logged and skipped."""
        paths = {tp: zkdata.partition_state_path(tp) for tp in partitions}
        raw = self.get_many(paths.values())
        return {tp: record for tp, path in paths.items() if (record := partition_state_of(path, raw[path])) is not None}

    def changed_since(self, paths: Iterable[str], zxid: int) -> set[str]:
        """The paths whose znode changed after `zxid`, or is gone, without reading them: SetWatches
        (zkprotocol), whose watches fire before it is answered. A watch left armed that fires later is
        no answer to anyone; the next call judges by zxid again."""
        paths, fired = list(paths), set()
        watchers = self.kazoo._data_watchers  # kazoo dispatches a fired watch to the callbacks kept here
        with self._change_lock:
            self._changes.append(fired)
        root = self.kazoo.chroot
        try:
            for path in paths:
                watchers[root + path].add(self._on_change)  # kept by the path with the chroot, as sent
            self.until_connected(lambda: [r.get() for r in [
                self._send(SetWatches(root, zxid, tuple(paths[i:i + SET_WATCHES_BATCH])))
                for i in range(0, len(paths), SET_WATCHES_BATCH)]], same_session=False)
            done = threading.Event()  # the watches fired before the answers run on kazoo's callback thread
            self.kazoo.handler.dispatch_callback(Callback("watch", done.set, ()))
            if not done.wait(self.session_timeout_ms / 1000):
                raise KrayError("kazoo's callback thread did not run the fired watches")
        finally:
            with self._change_lock:
                self._changes.remove(fired)
        return fired

    def _on_change(self, event) -> None:
        """kazoo's callback thread: a watch `changed_since` armed fired (a session's end fires with no path)."""
        if event.path is not None:
            with self._change_lock:
                for fired in self._changes:
                    fired.add(event.path)

    def create_partition_states(self, states: dict[TopicPartition, zkdata.PartitionStateZNode | bytes],
                                epoch_zk_version: int) -> dict[TopicPartition, Exception | None]:
        """Create the partitions, partition and state znodes of new partitions, fenced.

        Returns, per partition, None on success or the error (NodeExistsError when
        the state already exists).
        """
        topics = {tp.topic for tp in states}
        parents = [zkdata.topic_partitions_path(t) for t in sorted(topics)]
        parents += [zkdata.topic_partition_path(tp) for tp in sorted(states)]
        existing = self.existing(parents)
        self.fenced_multi([CreateOp(p) for p in parents if p not in existing], epoch_zk_version)
        ops = {zkdata.partition_state_path(tp): tp for tp in states}
        results = self.fenced_multi(
            [CreateOp(path, _znode_bytes(states[tp])) for path, tp in ops.items()], epoch_zk_version, pipelined=True
        )
        return {ops[r.op.path]: r.error for r in results}

    def delete_paths_fenced(self, paths: list[str], epoch_zk_version: int) -> None:
        """Delete znodes that exist (checked first, pipelined), fenced; a vanished one is no error."""
        existing = self.existing(paths)
        self.fenced_multi([DeleteOp(p) for p in paths if p in existing], epoch_zk_version)

    def delete_path_fenced(self, path: str, epoch_zk_version: int) -> None:
        self.delete_paths_fenced([path], epoch_zk_version)

    def set_partition_reassignment(self, znode: zkdata.ReassignPartitionsZNode, epoch_zk_version: int) -> None:
        self._set_fenced(zkdata.REASSIGN_PARTITIONS, znode.encode(), epoch_zk_version)

    def set_topic_znode(self, topic: str, znode: zkdata.TopicZNode, epoch_zk_version: int) -> None:
        self._set_fenced(zkdata.topic_path(topic), znode.encode(), epoch_zk_version)

    def _set_fenced(self, path: str, data: bytes, epoch_zk_version: int) -> None:
        """One fenced set; its own failure (the znode was deleted meanwhile) is logged, not raised, so
        that the event goes on (the deletion's own event follows)."""
        (result,) = self.fenced_multi([SetDataOp(path, data)], epoch_zk_version)
        if result.error is not None:
            log.error("Could not update %s: %r", path, result.error)

    def delete_topic(self, topic: str, epoch_zk_version: int) -> None:
        """Delete a topic's znodes bottom-up (state, partition, partitions, topic), its config and its
        deletion request, in fenced multis."""
        paths = [zkdata.topic_path(topic)]
        partitions = self.children(zkdata.topic_partitions_path(topic))
        if partitions or self.exists(zkdata.topic_partitions_path(topic)):
            paths.append(zkdata.topic_partitions_path(topic))
            for p in partitions:
                tp_path = f"{zkdata.topic_partitions_path(topic)}/{p}"
                paths.append(tp_path)
                paths.extend(f"{tp_path}/{c}" for c in self.children(tp_path))
        ops = [DeleteOp(p) for p in reversed(paths)]
        ops += [DeleteOp(p) for p in (zkdata.topic_config_path(topic), zkdata.delete_topic_path(topic))
                if self.exists(p)]
        failed = [r for r in self.fenced_multi(ops, epoch_zk_version)
                  if r.error is not None and not isinstance(r.error, NoNodeError)]
        if failed:  # e.g. a child created meanwhile: the caller keeps the topic queued and tries again
            raise KrayError(f"could not delete topic {topic}: {failed[0].op.path}: {failed[0].error!r}")

    def update_partition_states(self, updates: dict[TopicPartition, tuple[zkdata.PartitionStateZNode | bytes, int]],
                                epoch_zk_version: int) -> dict[TopicPartition, int | Exception]:
        """Conditional (zkVersion) updates of partition states, fenced; new zkVersion or error per partition."""
        return self.begin_update_partition_states(updates, epoch_zk_version)()

    def begin_update_partition_states(self, updates: dict[TopicPartition, tuple[zkdata.PartitionStateZNode | bytes, int]],
                                      epoch_zk_version: int, one_per_multi: bool = False,
                                      ) -> Callable[[], dict[TopicPartition, int | Exception]]:
        """update_partition_states in two steps: the writes leave now, the returned function waits for them.
        In batches of MULTI_BATCH that give the rest back at STALE_VERSIONS_PER_BATCH stale versions; or,
        `one_per_multi`, each in a fenced multi of its own (pipelined, as Kafka sends them), so that a
        stale version fails only its own write, for versions that are likely current but may have moved."""
        ops = {zkdata.partition_state_path(tp): tp for tp in updates}
        wait = self.begin_fenced_multi(
            [SetDataOp(path, _znode_bytes(updates[tp][0]), updates[tp][1]) for path, tp in ops.items()],
            epoch_zk_version, stale_limit=None if one_per_multi else STALE_VERSIONS_PER_BATCH,
            batch_size=1 if one_per_multi else MULTI_BATCH)
        return lambda: {ops[r.op.path]: (r.error if r.error else r.stat.version) for r in wait()}


def _znode_bytes(state: zkdata.ZNodeModel | bytes) -> bytes:
    """Callers on hot paths pass pre-encoded JSON; others pass the model."""
    return state if isinstance(state, bytes) else state.encode()


def expire_session(connect: str, client_id: tuple[int, bytes]) -> None:
    """End another client's session as a long network partition would: take it over with its id and
    password, then close it. Its ephemerals go at once; its owner sees the session expire."""
    thief = KazooClient(hosts=connect, client_id=client_id)
    thief.start(timeout=15)
    thief.stop()
    thief.close()
