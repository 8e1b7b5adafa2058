"""The Azure Functions blueprints, one per role; ``function_app.py`` registers each of them.

A trigger decodes its binding, calls the same plain role function the local host calls, with the
dependencies :func:`function_host.wiring.dependencies` built, and settles the message. Nothing else
lives in a decorator.
"""
