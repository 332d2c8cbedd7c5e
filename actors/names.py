"""The names of the cluster's named Ray actors. Actors find each other by name (`ray.get_actor`),
and tools and chaos find them to query or kill, so whoever names an actor and whoever looks it up
read the name from here."""
from __future__ import annotations

import uuid


def broker_actor_name(broker_id: int) -> str:
    return f"broker-{broker_id}"


def broker_id_of(name: str) -> int | None:
    """N when `name` is broker N's actor name, else None."""
    prefix, _, number = name.partition("-")
    return int(number) if prefix == "broker" and number.isdigit() else None


def controller_actor_name(broker_id: int) -> str:
    return f"controller-{broker_id}"


def request_sender_name(broker_id: int) -> str:
    """The RequestSender to broker N (Kafka names the thread Controller-C-to-broker-N-send-thread;
    here one sender serves every controller in turn)."""
    return f"RequestSender-to-broker-{broker_id}"


def replacement_sender_name(broker_id: int, controller_id: int) -> str:
    """A name of its own for a RequestSender a controller starts in place of a killed one, so that the
    broker's next incarnation always finds `request_sender_name` free."""
    return f"{request_sender_name(broker_id)}-of-controller-{controller_id}-{uuid.uuid4().hex[:8]}"


def is_request_sender_to(name: str, broker_id: int) -> bool:
    """Whether an actor's name is one of the RequestSenders to the broker: its own, or a replacement."""
    base = request_sender_name(broker_id)
    return name == base or name.startswith(f"{base}-of-controller-")


def recorder_name(run_id: str) -> str:
    """The RunRecorder of a run: the actors' record sinks look it up by this name."""
    return f"recorder-{run_id}"
