"""The demo services as service bindings: what ``SERVICE_BINDINGS`` holds for a run against them.

The demo drivers give the agents these bindings exactly as a user would give theirs: one per agent,
all at the demo services' URL, authenticated with tokens for :data:`DEMO_SERVICES_SCOPE`. Importing it
needs no web framework (the worker-driven tests build these bindings).
"""

from __future__ import annotations

import argparse
import sys

from orderflow.bindings import EntraAuth, OperationBinding, ServiceBinding, ServiceBindings

DEMO_SERVICES_AUDIENCE = "api://orderflow-demo-services"
"""``aud`` the demo services accept (:mod:`demo.services.auth`): their app ID URI."""
DEMO_SERVICES_SCOPE = f"{DEMO_SERVICES_AUDIENCE}/.default"
"""The scope the demo services' bindings ask tokens for."""

_SHIPPING = {
    "ship": OperationBinding(path="/shipping/shipments", result=("shipmentId", "carrier")),
    "cancel": OperationBinding(path="/shipping/shipments/cancel", result=("undone", "reason", "shipmentId")),
}
DEMO_OPERATIONS: dict[str, dict[str, OperationBinding]] = {
    "inventory": {
        "reserve": OperationBinding(
            path="/inventory/reservations", result=("reservationId", "holdId", "expiresAt")
        ),
        "commit": OperationBinding(
            path="/inventory/reservations/commit", result=("reservationId", "committed")
        ),
        "release": OperationBinding(
            path="/inventory/reservations/release", result=("undone", "reason", "reservationId")
        ),
    },
    "payment": {
        "charge": OperationBinding(path="/payments/charges", result=("chargeId", "amount", "currency")),
        "refund": OperationBinding(
            path="/payments/refunds", result=("undone", "reason", "chargeId", "refundId", "amount")
        ),
        "authorize": OperationBinding(
            path="/payments/authorizations",
            result=("authorizationId", "holdId", "expiresAt", "amount", "currency"),
        ),
        "capture": OperationBinding(
            path="/payments/authorizations/capture", result=("authorizationId", "chargeId", "amount")
        ),
        "void": OperationBinding(
            path="/payments/authorizations/void",
            result=("undone", "reason", "authorizationId", "refundId", "expired"),
        ),
    },
    "shipping": _SHIPPING,
    # The second carrier: a courier posting to the same demo shipping service.
    "courier": _SHIPPING,
}
"""Agent -> operation -> request on the demo services. The undos address the forward call by its key
(``forwardKey`` in the body) and answer ``undone`` true with the effect's ids, or false
(``never_applied`` / ``refused``: the key is then unusable for forward calls). Holds (a reservation
with ``holdS``, an authorisation) answer ``holdId`` and ``expiresAt``; their commits name the hold by
``holdId``."""


def demo_bindings(url: str, *, scope: str = DEMO_SERVICES_SCOPE, timeout_s: float = 30.0) -> ServiceBindings:
    """The bindings of every agent to the demo services at ``url``.

    Args:
        url: The demo services' base URL (``http://127.0.0.1:<port>``).
        scope: The scope of the agents' tokens.
        timeout_s: The most one call may take (the step's deadline cuts it shorter).
    """
    return ServiceBindings(
        services={
            agent: ServiceBinding(
                base_url=url,
                auth=EntraAuth(mode="entra", scope=scope),
                timeout_s=timeout_s,
                operations=operations,
            )
            for agent, operations in DEMO_OPERATIONS.items()
        }
    )


def demo_bindings_json(url: str, *, scope: str = DEMO_SERVICES_SCOPE) -> str:
    """``SERVICE_BINDINGS`` for the demo services at ``url``, with tokens for ``scope``."""
    return demo_bindings(url, scope=scope).to_json()


def main(argv: list[str] | None = None) -> int:
    """``python -m demo.services.bindings URL [--scope SCOPE]``: print ``SERVICE_BINDINGS`` for the demo
    services at URL (on Azure, ``--scope`` is ``<the services' app ID URI>/.default``).

    Returns:
        0, or 2 (after a line on stderr) with arguments argparse refuses or a URL no binding takes.
    """
    parser = argparse.ArgumentParser(
        prog="python -m demo.services.bindings", description="Print SERVICE_BINDINGS for the demo services."
    )
    parser.add_argument("url", help="the demo services' base URL (https, or http to a private host)")
    parser.add_argument("--scope", default=DEMO_SERVICES_SCOPE, help="the scope of the agents' tokens")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    try:
        print(demo_bindings_json(args.url, scope=args.scope))
    except ValueError as exc:  # pydantic's ValidationError is one
        print(f"{parser.prog}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
