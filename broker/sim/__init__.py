"""In-process overlays of routers, for tests and traffic figures."""

from broker.sim.overlay import Overlay, RefusedError, SimClient

__all__ = ["Overlay", "RefusedError", "SimClient"]
