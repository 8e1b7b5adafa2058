"""The Azure Functions triggers, one module per role; ``function_app.py`` registers each module's
blueprint, and the intake's per-client triggers through
:func:`function_host.blueprints.intake.register_client_triggers`.

A trigger decodes its binding, calls the same plain role function the local host calls, with the
dependencies :func:`function_host.wiring.dependencies` built, and settles the message. Nothing else
lives in a decorator.
"""
