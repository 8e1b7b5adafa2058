"""The Azure Functions host: everything ``function_app.py`` registers, and the support code it shares.

- :mod:`function_host.blueprints`: one blueprint per role (``intake``, ``operator_api``,
  ``orchestrators``, ``activities``, ``agents``, ``supervisor``). A trigger decodes its binding, calls one
  plain role function with its dependencies and settles (or answers); the blueprints are the modules here
  that import roles (besides :mod:`function_host.durable`, which implements the workflow-context port of
  the ``orchestrators`` role).
- :mod:`function_host.wiring`: the worker process's one :class:`~orderflow.dependencies.Dependencies`,
  built from the app settings with identity-based connections.
- :mod:`function_host.settlement`: orderflow's settlement policy applied to a Service Bus trigger's
  message, and the redelivery that stands in for a delayed abandon.
- :mod:`function_host.startup`: the checks that refuse to index the app on Azure with an unsafe setting.
- :mod:`function_host.durable_client`: the roles' orchestration client over the durable client binding.
- :mod:`function_host.durable`: the workflow-context adapter the order workflow runs on in Durable
  Functions.

Dependencies point one way (docs/design.md §6): ``function_app`` → blueprints → roles → ``orderflow/``,
and the support modules serve the blueprints from the core (the Durable Functions adapter also from the
port it implements, ``orchestrators.context``). No role and nothing in the core
imports this package; the local host (``devhost/``) is its counterpart, not its user.
"""
