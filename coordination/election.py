"""Controller election: the first broker to create ephemeral /controller wins.

Each win increments /controller_epoch by a conditional update in the same
multi as the create, so epochs are unique and ordered. Failure cases:

- /controller deleted (the controller's session expired or it resigned): every
  candidate's watch fires and each calls `elect` again.
- /controller names another broker while we think we are active: resign.
- our session expires (kazoo LOST): our ephemeral is gone; resign, and elect
  again once a new session is connected.

The watch callback only calls `notify`, which must just enqueue an event.
"""
from __future__ import annotations

import logging
from typing import Callable, NamedTuple

from kazoo.exceptions import NodeExistsError
from kazoo.recipe.watchers import DataWatch

from coordination import zkdata
from coordination.errors import ControllerMovedException, MalformedZNodeError
from coordination.zkclient import DeleteOp, KrayZkClient

log = logging.getLogger(__name__)


class ControllerEpoch(NamedTuple):
    epoch: int
    zk_version: int


class ActiveController(NamedTuple):
    """Who holds /controller, by which znode (czxid), won at which /controller_epoch zkVersion."""
    broker_id: int
    czxid: int
    epoch_zk_version: int


class ControllerElection:
    def __init__(self, zk: KrayZkClient, broker_id: int, notify: Callable[[], None]):
        self.zk = zk
        self.broker_id = broker_id
        self._notify = notify
        self._watch: DataWatch | None = None

    def watch(self) -> None:
        """Call `notify` on every create, change or delete of /controller (survives reconnects)."""
        self._watch = DataWatch(self.zk.kazoo, zkdata.CONTROLLER, lambda data, stat, event=None: self._notify())

    def active_controller_id(self) -> int | None:
        try:
            return self.zk.get_controller_id()
        except MalformedZNodeError as e:
            log.error("Cannot read the active controller: %s", e)
            return -1

    def elect(self) -> ControllerEpoch | None:
        """Try to become controller; the new epoch on success, None when another broker is."""
        if self.active_controller_id() is not None:
            return None
        try:
            return ControllerEpoch(*self.zk.register_controller_and_increment_epoch(self.broker_id))
        except (ControllerMovedException, NodeExistsError) as e:
            log.info("Broker %d lost the controller election: %s", self.broker_id, e)
            return None

    def current(self) -> ActiveController | None:
        """The /controller znode and the election that made it; None when there is none, it is
        unreadable, or an election is under way between the two reads."""
        epoch = self.zk.get(zkdata.CONTROLLER_EPOCH)
        got = self.zk.get(zkdata.CONTROLLER)
        if epoch is None or got is None or epoch[1].mzxid != got[1].czxid:
            return None  # the same multi writes both, so their zxids agree unless another election ran
        try:
            broker_id = zkdata.decode(zkdata.ControllerZNode, zkdata.CONTROLLER, got[0]).brokerid
        except MalformedZNodeError as e:
            log.error("Cannot read the active controller: %s", e)
            return None
        return ActiveController(broker_id, got[1].czxid, epoch[1].version)

    def remove_dead_controller(self, dead: ActiveController) -> bool:
        """Delete /controller if no election has run since `dead`'s (Ray reported its process dead);
        every candidate's watch then fires and the election runs without waiting for the dead session
        to time out. Fenced by /controller_epoch, which every election bumps: a newer /controller (even
        of the same broker) stays, which a versioned delete alone would not ensure."""
        try:
            (result,) = self.zk.fenced_multi([DeleteOp(zkdata.CONTROLLER)], dead.epoch_zk_version)
        except ControllerMovedException:
            return False
        if result.error is not None:  # already gone
            return False
        log.info("Broker %d removed /controller of broker %d, whose actor Ray reports dead",
                 self.broker_id, dead.broker_id)
        return True

    def still_controller(self) -> bool:
        """True when /controller names this broker and is owned by this session."""
        got = self.zk.get(zkdata.CONTROLLER)
        return bool(got) and got[1].ephemeralOwner == self.zk.session_id
