"""The group coordinator (Kafka's kafka.coordinator.group): the coordinator, its groups' metadata, and
their records in __consumer_offsets; the requests that reach it are network/group_apis.py's. It
reaches the replica server only through its own narrow interface (`GroupLog` in
group_metadata_manager.py), as the controller's flows reach the controller through FlowScope."""
