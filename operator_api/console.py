"""The web console's static files, served under ``/api/operator/console/`` by the operator API's handler.

The console is plain HTML, ES modules and CSS in ``operator_api/console/`` (docs/console.md): no build
step, nothing fetched from elsewhere. Its files hold no data and need no token; every data call the page
makes carries the bearer token the operator pasted (or the sign-in gave), and the API checks it as it
checks any other call. Each file is answered with its content type and a strict Content-Security-Policy:
scripts and styles from this origin only, connections to it (and, when the console signs operators in
itself, to the sign-in authority's origin: :func:`content_security_policy`), no inline script or style,
no framing. Only the
files in the folder whose names :data:`FILE_NAME` allows are served; a path is never joined onto the
file system.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

CONSOLE_DIR = Path(__file__).parent / "console"
"""Where the console's files are (package data of ``operator_api``)."""

FILE_NAME = re.compile(r"[a-z0-9][a-z0-9-]*\.(html|js|css|svg)")
"""Names of the files served: lowercase, one suffix, at the top of :data:`CONSOLE_DIR` only."""

CONTENT_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
"""Content type of each suffix."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The console's policy: its own scripts, styles and API calls; nothing inline, nothing framed."""


def authority_origin(authority: str) -> str:
    """The origin (``https://host[:port]``) of a sign-in authority URL.

    Raises:
        ValueError: not an https URL with a host.
    """
    parts = urlsplit(authority)
    if parts.scheme != "https" or not parts.hostname or any(c in parts.netloc for c in " ;,'\""):
        raise ValueError("the sign-in authority must be an https URL")
    return f"https://{parts.netloc.rpartition('@')[2]}"


def content_security_policy(authority: str | None = None) -> str:
    """:data:`CONTENT_SECURITY_POLICY`, with the origin of ``authority`` (the console's sign-in authority:
    its OpenID configuration and token endpoint are fetched) added to ``connect-src`` when given."""
    if authority is None:
        return CONTENT_SECURITY_POLICY
    return CONTENT_SECURITY_POLICY.replace(
        "connect-src 'self';", f"connect-src 'self' {authority_origin(authority)};"
    )


STATIC_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # Revalidated on every load, so a deployment's new files are seen at once.
    "Cache-Control": "no-cache",
}
"""Headers of every console file besides its ``Content-Type``."""

INDEX = "index.html"
"""What ``/api/operator/console/`` answers."""


@cache
def console_files() -> dict[str, tuple[bytes, str]]:
    """Every file served: name -> (content, content type), read once from :data:`CONSOLE_DIR`."""
    files: dict[str, tuple[bytes, str]] = {}
    for path in sorted(CONSOLE_DIR.iterdir()):
        match = FILE_NAME.fullmatch(path.name)
        if match and path.is_file():
            files[path.name] = (path.read_bytes(), CONTENT_TYPES[match.group(1)])
    return files


def console_file(name: str, *, authority: str | None = None) -> tuple[bytes, dict[str, str]] | None:
    """The content and headers of the console file ``name`` (``""`` is the index page), or None when
    there is no such file (a name with a ``/``, ``..`` or a suffix not served is none). ``authority``:
    the console's sign-in authority, whose origin the policy lets the page connect to."""
    found = console_files().get(name or INDEX)
    if found is None:
        return None
    content, content_type = found
    headers = {"Content-Type": content_type, **STATIC_HEADERS}
    headers["Content-Security-Policy"] = content_security_policy(authority)
    return content, headers
