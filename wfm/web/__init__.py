"""``wfm web``: the dashboard. Data access in ``sources``, HTML in ``pages``, pictures in ``svg``,
the Starlette application in ``app``."""

from wfm.web.app import Dashboard, create_app

__all__ = ["Dashboard", "create_app"]
