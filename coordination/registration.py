"""Broker registration: ephemeral /brokers/ids/N with Kafka's v5 JSON.

The znode's czxid is the broker epoch the controller puts in its requests.
Failure cases:
- a previous incarnation's session still owns /brokers/ids/N (a killed actor's
  session lives until its timeout): wait for the znode to go, then register.
- our session expires: the znode is gone; re-register as soon as a new session
  is connected. The state listener only sets a flag; a worker thread registers.
- the znode is deleted while our session lives (the controller's Ray-based failure
  detector took us for dead): register again, with a new broker epoch, so that the
  controller sees a broker come back, but only after REMOVED_GRACE_S and only if
  `may_register_again` (the broker asks Ray whether its actor still lives): Ray reports
  an actor killed with ray.kill as dead before its process has exited, which can take
  seconds, and a dying process must not come back as a live broker. A watch on the znode
  only sets a flag too.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError
from kazoo.recipe.watchers import DataWatch

from coordination import zkdata
from coordination.errors import KrayError
from coordination.zkclient import KrayZkClient

log = logging.getLogger(__name__)

REMOVED_GRACE_S = 1.0


class BrokerRegistration:
    def __init__(self, zk: KrayZkClient, broker_id: int, info: Callable[[], zkdata.BrokerIdZNode],
                 on_registered: Callable[[int], None] = lambda epoch: None,
                 may_register_again: Callable[[], bool] = lambda: True):
        self.zk = zk
        self.broker_id = broker_id
        self._info = info
        self._on_registered = on_registered
        self._may_register_again = may_register_again  # False: this process is being stopped
        self._reregister = threading.Event()
        self._removed = threading.Event()  # the znode went while the session lived
        self._stopped = threading.Event()
        self._connected = threading.Event()  # a session is connected: re-registration may start
        self.broker_epoch = -1

    def register(self, timeout: float | None = None) -> int:
        """Register, waiting out a stale registration of an earlier session; returns the broker epoch."""
        timeout = timeout if timeout is not None else 2 * self.zk.session_timeout_ms / 1000 + 5
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.broker_epoch = self.zk.register_broker(self.broker_id, self._info())
                break
            except NodeExistsError:
                if time.monotonic() > deadline:
                    raise KrayError(
                        f"/brokers/ids/{self.broker_id} is still held by another session after {timeout:.0f}s"
                    ) from None
                time.sleep(0.2)
        log.info("Registered broker %d at path %s with broker epoch %d",
                 self.broker_id, zkdata.broker_path(self.broker_id), self.broker_epoch)
        self._on_registered(self.broker_epoch)
        return self.broker_epoch

    def keep_registered(self) -> None:
        """Re-register after every session expiry or removal, from a worker thread."""
        self.zk.add_state_listener(self._listener)
        DataWatch(self.zk.kazoo, zkdata.broker_path(self.broker_id), self._watch)
        threading.Thread(target=self._reregister_loop, name=f"broker-{self.broker_id}-registration",
                         daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self._reregister.set()
        self._connected.set()

    def _listener(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        if state == KazooState.LOST:
            self._reregister.set()

    def _watch(self, data, stat, event=None) -> bool | None:
        if self._stopped.is_set():
            return False
        if stat is None and self.broker_epoch >= 0:
            log.warning("Registration of broker %d at %s disappeared while its session lives; registering again "
                        "in %.1f s", self.broker_id, zkdata.broker_path(self.broker_id), REMOVED_GRACE_S)
            self._removed.set()
            self._reregister.set()
        return None

    def _reregister_loop(self) -> None:
        while not self._stopped.is_set():
            self._reregister.wait()
            if self._stopped.is_set():
                return
            self._reregister.clear()
            if self._removed.is_set():
                self._removed.clear()
                if self._stopped.wait(REMOVED_GRACE_S):
                    return
                if not self._may_register_again():
                    log.warning("Not registering broker %d again: this process is being stopped", self.broker_id)
                    continue
            while not self._stopped.is_set():
                while not self._stopped.is_set() and not self.zk.kazoo.connected:
                    self._connected.wait(0.5)
                try:
                    self.register()
                    break
                except Exception:  # connection lost again, or the old znode outlived our wait: keep trying
                    log.exception("Re-registration of broker %d failed; retrying", self.broker_id)
                    time.sleep(1.0)
