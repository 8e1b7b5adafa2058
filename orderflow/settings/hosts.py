"""What the start-up checks of every host share: the refusal of a setting with no safe value
(:class:`UnsafeAzureSetting`) and the host-name checks. The refusal of service bindings that cannot serve
the workflows is the agents section's (:func:`orderflow.settings.workflow.check_bindings`); the Azure
start-up policy itself is the Azure host's (``function_host.azure_policy``)."""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata


class UnsafeAzureSetting(ValueError):
    """A setting whose value has no safe meaning on Azure. The message is one line naming the setting,
    and never holds a secret's value.

    Attributes:
        setting: The setting's name.
    """

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        super().__init__(f"{setting} {reason}")


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
"""Names of this machine: ``localhost`` and the aliases Linux distributions put in ``/etc/hosts``."""

_DNS_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")
"""An ASCII DNS host name (what an Azure endpoint's host is)."""


def _normalised_host(host: str) -> str:
    # NFKC first, as IDNA does: fullwidth and enclosed letters and digits resolve as their ASCII forms.
    return unicodedata.normalize("NFKC", host.strip()).strip("[]").rstrip(".").lower()


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost`` (and ``*.localhost``, and the ``/etc/hosts``
    aliases ``localhost.localdomain``, ``ip6-localhost``, ``ip6-loopback``), 127.0.0.0/8 in any form
    the resolver accepts (``127.1``, ``2130706433``), ``::1``, an IPv4-mapped loopback, or an
    unspecified address (``0.0.0.0``, ``::``), which connects to this machine too; in any Unicode
    spelling that normalises to one of these (``ｌｏｃａｌｈｏｓｔ``). A name that only DNS maps to a
    loopback address is not recognised."""
    name = _normalised_host(host)
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except (OSError, UnicodeError):  # not an address; or not text (undecodable bytes)
            return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def is_host_name(host: str) -> bool:
    """Whether ``host`` is an ASCII DNS name or an IP address (an Azure endpoint's host is one)."""
    name = host.strip().strip("[]")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return _DNS_NAME.fullmatch(name.rstrip(".").lower()) is not None
    return True
