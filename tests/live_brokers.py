"""Live brokers as the controller reads them from their registrations, for pure tests."""
from actors.protocol import CLIENT_LISTENER, INTER_BROKER_LISTENER, EndPoint, LiveBroker

REPLICATION_PORT_OFFSET = 1000


def live_broker(broker_id: int, host: str = "h", port: int = 9092) -> LiveBroker:
    """A broker with kray's two listeners: clients' on `port`, replication's 1,000 above."""
    return LiveBroker(id=broker_id, endpoints=[EndPoint(CLIENT_LISTENER, host, port),
                                               EndPoint(INTER_BROKER_LISTENER, host, port + REPLICATION_PORT_OFFSET)])
