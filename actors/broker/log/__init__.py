"""Log storage (Kafka's kafka.log): segments of v2 record batches, their validation, producer state,
leader epochs, checkpoints, log directories and per-topic log configs. Below the replica server: it
imports nothing of it, nor of the wire or the group coordinator."""
