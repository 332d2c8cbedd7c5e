"""A broker's view of topic configs (Kafka's DynamicConfigManager for topics): every topic's
`/config/topics/T` read at start, then each `/config/changes/config_change_N` notification (written
by `kafka-configs --alter` or `kray configs --alter`) processed once, in sequence order, by reading
the topic's configs again and handing them to `on_topic_config(topic, overrides)`.

How it fails: the ZooKeeper watch only enqueues (kazoo's rule: never block in a watch callback); a
worker thread reads and calls back. A malformed notification or config znode is logged and skipped,
never the end of the listener. After a session loss the watch is set again on the next read, and
notifications not yet seen are processed then (the last sequence number processed is remembered).
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from coordination import zkdata
from coordination.errors import KrayError
from coordination.zkclient import KrayZkClient

log = logging.getLogger(__name__)


class ConfigChangeListener:
    def __init__(self, zk: KrayZkClient, on_topic_config: Callable[[str, dict[str, str]], None]):
        self.zk, self.on_topic_config = zk, on_topic_config
        self.last_processed = -1  # sequence number of the newest notification handled
        self._queue: queue.Queue[bool] = queue.Queue()
        self._stopped = False
        self.zk.until_connected(lambda: self.zk.kazoo.ensure_path(zkdata.CONFIG_CHANGES), same_session=False)
        self._process()  # the notifications so far are covered by reading every topic below
        for topic in self.zk.children(zkdata.CONFIG_TOPICS):
            self._apply(topic)
        self._thread = threading.Thread(target=self._run, name="config-change-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._queue.put(False)

    def _watch(self, _event) -> None:
        self._queue.put(True)

    def _run(self) -> None:
        while self._queue.get() and not self._stopped:
            try:
                for topic in self._process():
                    self._apply(topic)
            except Exception:  # ZooKeeper unreachable: the next event tries again
                log.exception("Processing config change notifications failed")

    def _process(self) -> list[str]:
        """The topics named by notifications newer than the last processed (the watch set again)."""
        children = self.zk.until_connected(
            lambda: self.zk.kazoo.get_children(zkdata.CONFIG_CHANGES, watch=self._watch), same_session=False)
        fresh = sorted((int(c.removeprefix(zkdata.CONFIG_CHANGE_PREFIX)), c) for c in children
                       if c.startswith(zkdata.CONFIG_CHANGE_PREFIX)
                       and c.removeprefix(zkdata.CONFIG_CHANGE_PREFIX).isdigit())
        topics = []
        for sequence, child in fresh:
            if sequence <= self.last_processed:
                continue
            self.last_processed = sequence
            path = f"{zkdata.CONFIG_CHANGES}/{child}"
            try:
                got = self.zk.get(path)
                if got is None:
                    continue
                kind, name = zkdata.decode(zkdata.ConfigChangeNotificationZNode, path, got[0]).entity()
            except KrayError as e:
                log.warning("Skipping config change notification %s: %s", child, e)
                continue
            if kind == "topics" and name:
                topics.append(name)
        return topics

    def _apply(self, topic: str) -> None:
        path = zkdata.topic_config_path(topic)
        try:
            znode = self.zk.get_znode(zkdata.TopicConfigZNode, path)
            self.on_topic_config(topic, znode.config if znode is not None else {})
        except KrayError as e:
            log.warning("Ignoring the configs of topic %s: %s", topic, e)
