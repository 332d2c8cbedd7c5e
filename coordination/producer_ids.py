"""Producer ids for InitProducerId, in blocks claimed from ZooKeeper (Kafka's ZooKeeper-mode
ProducerIdManager): each broker takes the next 1,000 ids with a versioned write of
`/latest_producer_id_block`, so that no two brokers ever hand out the same id.

How it fails: a lost race (another broker wrote the znode since it was read) is retried with the
new block; a znode that is not Kafka's JSON is a clear error and nothing is written; ZooKeeper
being unreachable raises to the caller (InitProducerId answers an error and the producer retries).
"""
from __future__ import annotations

import threading

from kazoo.exceptions import BadVersionError, NodeExistsError

from coordination import zkdata
from coordination.zkclient import KrayZkClient

BLOCK_SIZE = 1000  # Kafka's ProducerIdManager.PidBlockSize


class ProducerIdManager:
    def __init__(self, zk: KrayZkClient, broker_id: int, block_size: int = BLOCK_SIZE):
        self.zk, self.broker_id, self.block_size = zk, broker_id, block_size
        self._lock = threading.Lock()
        self._next, self._end = 0, -1  # the current block: next id to hand out, last id

    def generate_producer_id(self) -> int:
        with self._lock:
            if self._next > self._end:
                self._next, self._end = self._claim_block()
            self._next += 1
            return self._next - 1

    def _claim_block(self) -> tuple[int, int]:
        path = zkdata.LATEST_PRODUCER_ID_BLOCK
        while True:
            got = self.zk.get(path)
            if got is None or not got[0]:
                start = 0
            else:
                start = int(zkdata.decode(zkdata.ProducerIdBlockZNode, path, got[0]).block_end) + 1
            block = zkdata.ProducerIdBlockZNode(broker=self.broker_id, block_start=str(start),
                                                block_end=str(start + self.block_size - 1))
            try:
                if got is None:
                    self.zk.create(path, block.encode(), makepath=True)
                else:
                    self.zk.set(path, block.encode(), version=got[1].version)
                return start, start + self.block_size - 1
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed a block meanwhile: take the next
