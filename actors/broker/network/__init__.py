"""The wire (Kafka's kafka.network and KafkaApis): the socket server and client, request and response
codecs, the API versions, and the APIs that turn requests into calls on the replica manager, the admin
functions and the group coordinator. Above the replica server: nothing below imports it."""
