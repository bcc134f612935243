"""Clients of the overlay: async ``Client`` and the blocking ``BlockingClient``."""

from broker.client.blocking import BlockingClient
from broker.client.client import Client, ConnectError, Delivery, RefusedError, Subscription
from broker.errors import NoAnswer

__all__ = ["BlockingClient", "Client", "ConnectError", "Delivery", "NoAnswer", "RefusedError", "Subscription"]
