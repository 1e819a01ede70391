"""Who sent a request through the tap: the first `[[engine.agent]]` it matches, else
`other` (docs/tap.md#agents).

A token or a header's value is compared as bytes in constant time (hmac.compare_digest)
and kept nowhere else: the book holds the configured ones, a request's stay in its
headers. The `user` field comes from the body's scan (`exporter/daemon/tap/asks.py`).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping, Sequence

from exporter.config import OTHER_AGENT, AgentConfig

_BEARER = "bearer "


class AgentBook:
    """The agents of one engine, in their order; `names` are the label's values."""

    def __init__(self, agents: Sequence[AgentConfig] = ()) -> None:
        self.agents = tuple(agents)
        self.names = (*(a.name for a in self.agents), OTHER_AGENT)
        #: Whether a request's body must be read for its `user` field.
        self.wants_user = any(a.user for a in self.agents)
        self._keys = {a.name: a.api_key.encode() for a in self.agents if a.api_key}
        self._headers = {a.name: a.header_value.encode() for a in self.agents
                         if a.header_name}

    def name(self, headers: Mapping[str, str] | None, peer: str | None,
             user: str | None) -> str:
        """The name of the first agent the request matches. `headers` is the request's
        (case-insensitive, as aiohttp's), `peer` the client's address."""
        for agent in self.agents:
            if self._matches(agent, headers, peer, user):
                return agent.name
        return OTHER_AGENT

    def _matches(self, agent: AgentConfig, headers: Mapping[str, str] | None,
                 peer: str | None, user: str | None) -> bool:
        if agent.api_key:
            return headers is not None and any(
                hmac.compare_digest(token, self._keys[agent.name]) for token in _tokens(headers))
        if agent.header_name:
            return headers is not None and any(
                hmac.compare_digest(value.encode(), self._headers[agent.name])
                for value in _all(headers, agent.header_name))
        if agent.user:
            return user == agent.user
        return agent.address is not None and _in(peer, agent.address)


def _tokens(headers: Mapping[str, str]) -> list[bytes]:
    """The bearer tokens a request carries: `Authorization: Bearer T` (OpenAI clients)
    and `x-api-key: T` (Anthropic's)."""
    tokens = [value[len(_BEARER):].strip().encode() for value in _all(headers, "Authorization")
              if value[:len(_BEARER)].lower() == _BEARER]
    tokens += [value.strip().encode() for value in _all(headers, "x-api-key")]
    return tokens


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    if getall is not None:  # a multidict: every header of that name
        return list(getall(name, ()))
    value = headers.get(name)
    return [] if value is None else [value]


def _in(peer: str | None, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # a dual-stack listener's IPv4 client
    return address.version == network.version and address in network
