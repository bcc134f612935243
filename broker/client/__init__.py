"""Clients of the overlay: async ``Client`` and the blocking ``BlockingClient``."""

from broker.client.acks import Receipt
from broker.client.blocking import BlockingClient
from broker.client.client import (
    Client,
    ConnectError,
    Delivery,
    RefusedError,
    Subscription,
    TooManyUnacknowledged,
)
from broker.client.reconnect import DAEMON_BACKOFF, Backoff, BrokerList, Brokers, ConnectionEvent, brokers
from broker.errors import NoAnswer
from broker.messages.qos import Qos

__all__ = [
    "DAEMON_BACKOFF",
    "Backoff",
    "BlockingClient",
    "BrokerList",
    "Brokers",
    "Client",
    "ConnectError",
    "ConnectionEvent",
    "Delivery",
    "NoAnswer",
    "Qos",
    "Receipt",
    "RefusedError",
    "Subscription",
    "TooManyUnacknowledged",
    "brokers",
]
