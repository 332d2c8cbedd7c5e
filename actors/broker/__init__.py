"""The broker: replica manager, metadata cache, and the Broker actor that hosts them."""
