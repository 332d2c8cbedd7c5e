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

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from coordination import zkdata
from coordination.errors import ControllerMovedException, MalformedZNodeError
from coordination.zkclient import KrayZkClient

log = logging.getLogger(__name__)


class ControllerEpoch(NamedTuple):
    epoch: int
    zk_version: int


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

    def current(self) -> tuple[int, int] | None:
        """(broker id, czxid) of the /controller znode, None when there is none or it is unreadable."""
        got = self.zk.get(zkdata.CONTROLLER)
        if got is None:
            return None
        try:
            return zkdata.decode(zkdata.ControllerZNode, zkdata.CONTROLLER, got[0]).brokerid, got[1].czxid
        except MalformedZNodeError as e:
            log.error("Cannot read the active controller: %s", e)
            return None

    def remove_dead_controller(self, broker_id: int, czxid: int) -> bool:
        """Delete /controller if it is still the znode that controller created (Ray reported its process
        dead); every candidate's watch then fires and the election runs without waiting for the dead
        session to time out. A newer /controller (even of the same broker) stays."""
        got = self.zk.get(zkdata.CONTROLLER)
        if got is None or got[1].czxid != czxid:
            return False
        try:
            self.zk.kazoo.delete(zkdata.CONTROLLER, version=got[1].version)
        except (NoNodeError, BadVersionError):
            return False
        log.info("Broker %d removed /controller of broker %d, whose actor Ray reports dead", self.broker_id, broker_id)
        return True

    def still_controller(self) -> bool:
        """True when /controller names this broker and is owned by this session."""
        got = self.zk.get(zkdata.CONTROLLER)
        return bool(got) and got[1].ephemeralOwner == self.zk.session_id
