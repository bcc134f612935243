"""A blocking wrapper around the async client, for scripts: its event loop runs in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from broker.client.client import Client, Delivery
from broker.client.reconnect import Brokers
from broker.errors import NoAnswer
from broker.language import Filter, Publication
from broker.messages import DEFAULT_QOS, Qos

__all__ = ["BlockingClient"]

T = TypeVar("T")

_GRACE = 1.0  # seconds more than the client's own request timeout, which names what went unanswered


class BlockingClient:
    """``with BlockingClient(uri) as c: c.subscribe(...); c.receive(timeout=1)``.

    Every call returns or raises within about ``timeout`` seconds: connecting, and each request,
    raise ``NoAnswer`` (a ``RemoteError``) when the broker does not answer in time."""

    def __init__(
        self, uri: Brokers, client_id: str | None = None, timeout: float = 10.0, **options: Any
    ) -> None:
        """``uri``: one broker or a list to fail over along; ``options``: those of ``Client``."""
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wfm-client", daemon=True)
        self._thread.start()
        try:
            connecting = Client.connect(uri, client_id, timeout=timeout, request_timeout=timeout, **options)
            self.client: Client = self._run(connecting)
        except BaseException:
            self._stop()
            raise

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        wait = (self.timeout if timeout is None else timeout) + _GRACE
        try:
            return future.result(wait)
        except TimeoutError:
            if future.done():
                raise  # the coroutine's own timeout, which says what it waited for
            future.cancel()
            what = getattr(coroutine, "__qualname__", "a request")
            raise NoAnswer(f"no answer to {what} within {wait:g} s") from None

    def advertise(self, advertisement: Filter | str) -> str:
        return self._run(self.client.advertise(advertisement))

    def unadvertise(self, adv_id: str) -> None:
        self._run(self.client.unadvertise(adv_id))

    def subscribe(self, subscription: Filter | str) -> str:
        """Deliveries of every subscription arrive through ``receive``."""
        return self._run(self.client.subscribe(subscription, own_queue=False)).id

    def unsubscribe(self, sub_id: str) -> None:
        self._run(self.client.unsubscribe(sub_id))

    def publish(self, publication: Publication | str, qos: Qos = DEFAULT_QOS) -> str:
        return self._run(self.client.publish(publication, qos))

    def status(self, detail: bool = False) -> dict[str, object]:
        return self._run(self.client.status(detail))

    def stats(self) -> dict[str, int]:
        return self.client.stats()

    def receive(self, timeout: float = 1.0) -> Delivery | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""
        try:
            return self._run(self.client.next(timeout), timeout + self.timeout)
        except TimeoutError:
            return None

    def close(self) -> None:
        try:
            self._run(self.client.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.timeout)
        self._loop.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
