"""The group coordinator (Kafka's kafka.coordinator.group): groups and their offsets in
__consumer_offsets, and the group APIs. It reaches the replica server only through its own narrow
interface (`GroupLog` in group_coordinator.py), as the controller's flows reach the controller
through FlowScope."""
