"""Producer and consumer for load generators and tests, talking to broker actors as Kafka clients do."""
