"""Replicated sites: a site's routing state applied from its log (``state``), the inputs its
members propose (``inputs``). The log itself is :mod:`broker.consensus`; see docs/sites.md."""

from broker.sites.inputs import Input, MemberDown, decode_input, encode_input
from broker.sites.state import SiteState

__all__ = ["Input", "MemberDown", "SiteState", "decode_input", "encode_input"]
