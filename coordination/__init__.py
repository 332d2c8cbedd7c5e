"""ZooKeeper side of kray: server launcher, Kafka-exact znodes, typed client, election, admin."""
