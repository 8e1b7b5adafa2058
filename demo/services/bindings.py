"""The demo services as service bindings: what ``SERVICE_BINDINGS`` holds for a run against them.

The demo drivers give the agents these bindings exactly as a user would give theirs: one per agent,
all at the demo services' URL, authenticated with tokens for :data:`DEMO_SERVICES_SCOPE`. Importing it
needs no web framework (the worker-driven tests build these bindings).
"""

from __future__ import annotations

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
        "reserve": OperationBinding(path="/inventory/reservations", result=("reservationId",)),
        "release": OperationBinding(
            path="/inventory/reservations/release", result=("undone", "reason", "reservationId")
        ),
    },
    "payment": {
        "charge": OperationBinding(path="/payments/charges", result=("chargeId", "amount", "currency")),
        "refund": OperationBinding(
            path="/payments/refunds", result=("undone", "reason", "chargeId", "refundId", "amount")
        ),
    },
    "shipping": _SHIPPING,
    # The second carrier: a courier posting to the same demo shipping service.
    "courier": _SHIPPING,
}
"""Agent -> operation -> request on the demo services. The undos address the forward call by its key
(``forwardKey`` in the body) and answer ``undone`` true with the effect's ids, or false
(``never_applied`` / ``refused``: the key is then unusable for forward calls)."""


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


def demo_bindings_json(url: str) -> str:
    """``SERVICE_BINDINGS`` for the demo services at ``url``."""
    return demo_bindings(url).to_json()


def main(argv: list[str] | None = None) -> int:
    """``python -m demo.services.bindings URL``: print ``SERVICE_BINDINGS`` for the demo services at URL.

    Returns:
        0, or 2 (after a line on stderr) without exactly one URL or with one no binding takes.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m demo.services.bindings URL", file=sys.stderr)
        return 2
    try:
        print(demo_bindings_json(args[0]))
    except ValueError as exc:  # pydantic's ValidationError is one
        print(f"python -m demo.services.bindings: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
