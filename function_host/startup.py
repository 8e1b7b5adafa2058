"""The Azure host's start-up checks: ``function_app`` runs them on import, before any function is indexed."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import ValidationError

from function_host.azure_policy import check_azure, host_connection_refusals
from orderflow.settings import Settings, describe_invalid_settings, on_azure
from orderflow.settings.hosts import UnsafeAzureSetting


def check_start_up(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start on Azure with a setting that has no safe value there (``function_app`` calls
    this on import, so the worker's indexing fails and the host loads no function, with the reason).

    Raises:
        UnsafeAzureSetting: on Azure (:func:`orderflow.settings.on_azure` of ``environ``, default
            ``os.environ``), the first unsafe setting, named in a one-line message.
        ValueError: on Azure, a setting that does not parse, in one line naming it (a secret's value is
            never shown).
    """
    if not on_azure(environ):
        return
    refused = next(iter(host_connection_refusals(os.environ if environ is None else environ)), None)
    if refused is not None:
        raise UnsafeAzureSetting(*refused)
    try:
        settings = Settings.load(env=environ)
    except ValidationError as exc:
        raise ValueError(describe_invalid_settings(exc)) from None
    check_azure(settings)
