"""Who is calling and what they may do: the app roles, the verified principal, the role check, and the
refusals (401, 403, 503) with their one mapping onto an HTTP answer."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from orderflow import telemetry
from orderflow.entra_ids import guid_or_none
from orderflow.errors import ErrorKind, OrderflowError, TransientError

OPERATOR_ROLE = "orderflow.operator"
"""App role of an operator: list, inspect, resubmit, suspend, compensate, replay dead letters."""
REVIEWER_ROLE = "orderflow.reviewer"
"""App role of a reviewer: decide an order paused for review."""
ROLES = (OPERATOR_ROLE, REVIEWER_ROLE)
"""Every app role the operator API checks (the ``value`` of each app role of its app registration)."""


REALM = "orderflow"
"""The ``realm`` of the ``WWW-Authenticate`` challenge."""


_CHALLENGE_TEXT = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
"""Characters RFC 6750 §3 does not allow in ``error_description`` (quotes, backslashes, non-ASCII)."""


@dataclass(frozen=True)
class Principal:
    """A caller the operator API has verified.

    Attributes:
        object_id: ``oid``: the user's (or the calling service principal's) object id in the tenant,
            the same for every app; what audit fields record and what two principals are compared by.
        tenant_id: ``tid``: the tenant that issued the token.
        subject: ``sub``: the principal as this API sees it (pairwise per app in Entra).
        roles: ``roles``: the app roles granted to the principal (none if the claim is absent).
        app_id: ``azp`` (v2.0) or ``appid`` (v1.0): the client application that asked for the token.
        display_name: ``name``, else ``preferred_username``: for showing only; never an identity.
    """

    object_id: str
    tenant_id: str
    subject: str
    roles: frozenset[str]
    app_id: str = ""
    display_name: str = ""

    def has_role(self, role: str) -> bool:
        """Whether the token granted app role ``role``."""
        return role in self.roles

    def may_be(self, principal_id: str) -> bool:
        """Whether ``principal_id`` (an object id, e.g. a client's ``principalId``) may name this principal:
        the same GUID in any written form. An id of either that is not a GUID cannot be told apart from
        the other, so it counts as the same: a rule refusing a principal its own orders refuses then."""
        mine, theirs = guid_or_none(self.object_id), guid_or_none(principal_id)
        return mine is None or theirs is None or mine == theirs

    @property
    def audit_id(self) -> str:
        """Who acted, as audit fields record it: ``<tenant id>/<object id>``, the verified ids (the tenant
        too, since an object id is unique only within its tenant). Never the display name."""
        return f"{self.tenant_id}/{self.object_id}"

    def audit_fields(self) -> dict[str, str]:
        """What an audit record says about who acted: the verified ids, and the name for people to read."""
        return {
            "principalId": self.object_id,
            "tenantId": self.tenant_id,
            "appId": self.app_id,
            "displayName": self.display_name,
        }


class Unauthenticated(OrderflowError):
    """The request does not prove who is calling: no bearer token, or one that fails a check (401).

    Attributes:
        reason: A few fixed words on what failed (``token expired``); never any part of the token.
        error: The RFC 6750 error code: ``invalid_token``, or None when the request carried no bearer
            token at all (RFC 6750 §3.1: then the challenge names no error).
    """

    kind = ErrorKind.UNAUTHENTICATED

    def __init__(self, reason: str, *, error: str | None = "invalid_token") -> None:
        self.reason = reason
        self.error = error
        super().__init__(reason)

    def www_authenticate(self) -> str:
        """The ``WWW-Authenticate`` header value of the 401 response."""
        return www_authenticate(error=self.error, description=self.reason if self.error else "")


class Forbidden(OrderflowError):
    """A verified principal asked for an action its app roles do not allow (403).

    Attributes:
        principal_id: The principal's object id.
        role: The app role the action needs (the first, when any of several would do).
        roles: Every app role that would allow the action.
    """

    kind = ErrorKind.FORBIDDEN

    def __init__(self, principal: Principal, role: str, *alternatives: str) -> None:
        self.principal_id = principal.object_id
        self.role = role
        self.roles = (role, *alternatives)
        super().__init__(f"principal {principal.object_id} does not have {self._needed()}")

    def _needed(self) -> str:
        if len(self.roles) == 1:
            return f"the app role {self.role}"
        return f"any of the app roles {', '.join(self.roles)}"

    def www_authenticate(self) -> str:
        """The ``WWW-Authenticate`` header value of the 403 response (RFC 6750 ``insufficient_scope``)."""
        return www_authenticate(error="insufficient_scope", description=f"requires {self._needed()}")


class SigningKeysUnavailable(TransientError):
    """The signing keys could not be fetched or were unusable: the token could not be checked (503)."""


def www_authenticate(*, error: str | None = None, description: str = "") -> str:
    """A ``Bearer`` challenge (RFC 6750 §3): ``Bearer realm="orderflow", error="...",
    error_description="..."``; ``error`` and ``error_description`` only when given. Characters the RFC
    does not allow in the description are dropped."""
    parts = [f'realm="{REALM}"']
    if error:
        parts.append(f'error="{error}"')
    if description:
        parts.append(f'error_description="{_CHALLENGE_TEXT.sub("", description)}"')
    return "Bearer " + ", ".join(parts)


def http_refusal(error: Unauthenticated | Forbidden | SigningKeysUnavailable) -> tuple[int, dict[str, str]]:
    """The HTTP status and headers that answer a refused operator API request.

    Returns:
        ``(401, {"WWW-Authenticate": ...})``, ``(403, {"WWW-Authenticate": ...})`` or ``(503, {})``.
    """
    if isinstance(error, Unauthenticated):
        return 401, {"WWW-Authenticate": error.www_authenticate()}
    if isinstance(error, Forbidden):
        return 403, {"WWW-Authenticate": error.www_authenticate()}
    return 503, {}


def authorize(principal: Principal, role: str, *alternatives: str) -> None:
    """Refuse, and record, a principal without app role ``role`` (or any of ``alternatives``).

    A refusal is an ``operator.forbidden`` event (:func:`orderflow.telemetry.event`) with the principal's
    object id and tenant and the role (the roles, comma-separated, when any of several would do).

    Raises:
        Forbidden: ``principal`` has none of the roles.
        ValueError: a role is not one of :data:`ROLES` (a programming error).
    """
    for needed in (role, *alternatives):
        if needed not in ROLES:
            raise ValueError(f"unknown app role {needed!r}; the operator API's roles are {', '.join(ROLES)}")
    if not any(principal.has_role(needed) for needed in (role, *alternatives)):
        telemetry.event(
            "operator.forbidden",
            principal_id=principal.object_id,
            tenant_id=principal.tenant_id,
            role=",".join((role, *alternatives)),
        )
        raise Forbidden(principal, role, *alternatives)


def known_roles(roles: Iterable[str]) -> tuple[str, ...]:
    """``roles`` when each is one of :data:`ROLES`, sorted and without repeats.

    Raises:
        ValueError: one is not (naming it and the known ones).
    """
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown app role {unknown[0]!r}: choose from {', '.join(ROLES)}")
    return tuple(sorted(set(roles)))
