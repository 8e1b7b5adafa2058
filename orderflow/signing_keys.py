"""The operator API's token signing keys: a cached key set that callers can neither stall nor flood.

:class:`SigningKeys` answers "which key has key id ``kid``?" for
:class:`orderflow.operator_auth.TokenValidator`. ``jwt.PyJWKClient`` does each fetch (http(s) only, no
redirects, its timeout, the JWKS parsed and filtered to signing keys); this module decides when to fetch
and who waits:

- A key id in the cached set is answered from memory: the lock is never held over a fetch or a wait, so
  such a request never waits for any fetch. A set older than its lifespan is refetched in the background
  while it keeps serving, as Microsoft's identity libraries do; a key dropped from the set stops being
  accepted once a refetch succeeds.
- One fetch at a time (a single flight): every request that needs the set while a fetch runs shares that
  fetch, and waits on it for at most ``wait_s``; then the answer is :class:`KeySetUnavailable` (503), and
  the fetch goes on for whoever asks next.
- A key id the cached set lacks causes a refetch at most once per ``refresh_cooldown_s``, counted from the
  start of the last fetch, whether it succeeded or not; in between it is refused (:class:`UnknownKeyId`)
  without a wait. A key id that a completed fetch did not contain is remembered for ``unknown_key_ttl_s``
  (at most :data:`MAX_UNKNOWN_KEY_IDS` of them) and refused without a refetch until then, while any other
  key id may still be a rotation and refetch the set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import jwt

logger = logging.getLogger(__name__)

MAX_UNKNOWN_KEY_IDS = 1024
"""Most key ids remembered as unknown; past it the oldest is forgotten (it may then refetch once more)."""
RETRY_WITHOUT_KEYS_S = 1.0
"""Least seconds between two fetches while no key set was ever fetched: every request needs one, so the
endpoint is tried again soon, but a failing endpoint is not asked once per request."""


class UnknownKeyId(Exception):
    """No signing key has this key id: the token cannot be genuine (401)."""


class KeySetUnavailable(Exception):
    """The key set could not be fetched in time, or held no usable key: the token could not be checked (503).

    Attributes:
        detail: A few fixed words on what failed.
    """

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


@dataclass
class _Flight:
    """One fetch of the key set, shared by every request that waits on it."""

    done: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None
    """Why the fetch failed (fixed words), or None once it succeeded."""


class SigningKeys:
    """The signing keys of one JWKS endpoint; safe to share between threads.

    Args:
        jwks_uri: The JWKS endpoint, http or https.
        fetch_timeout_s: Timeout of one fetch's connection and reads, seconds.
        wait_s: Longest a request waits on a fetch, seconds.
        cache_s: Seconds after a fetch before the set is refetched (in the background).
        refresh_cooldown_s: Least seconds between two fetches that unknown key ids cause.
        unknown_key_ttl_s: Seconds a key id a fetched set lacked is refused without a refetch.
        monotonic: The clock, seconds (``time.monotonic``; a test's own).
    """

    def __init__(
        self,
        jwks_uri: str,
        *,
        fetch_timeout_s: float,
        wait_s: float,
        cache_s: float,
        refresh_cooldown_s: float,
        unknown_key_ttl_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = jwt.PyJWKClient(jwks_uri, cache_jwk_set=False, timeout=fetch_timeout_s)
        self._wait_s = wait_s
        self._cache_s = cache_s
        self._cooldown_s = refresh_cooldown_s
        self._unknown_ttl_s = unknown_key_ttl_s
        self._clock = monotonic
        # Guards every field below; held for dictionary work only, never over a fetch or a wait.
        self._lock = threading.Lock()
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._last_attempt: float | None = None
        self._flight: _Flight | None = None
        self._unknown: dict[str, float] = {}
        """Key id -> monotonic time until which it is refused without a refetch; oldest first."""

    def get(self, key_id: str) -> jwt.PyJWK:
        """The signing key with key id ``key_id``.

        Raises:
            UnknownKeyId: the key set (cached, or fetched for this request) has no such key.
            KeySetUnavailable: the key set could not be fetched within ``wait_s``, or held no usable key.
        """
        with self._lock:
            now = self._clock()
            key = self._keys.get(key_id)
            if key is not None:
                if self._due_for_refresh(now):
                    self._start_flight(now)  # nobody waits on it
                return key
            flight = self._flight_for(key_id, now)
        return self._awaited(flight, key_id)

    def _due_for_refresh(self, now: float) -> bool:
        return (
            self._flight is None
            and self._fetched_at is not None
            and now - self._fetched_at >= self._cache_s
            and self._may_fetch(now, self._cooldown_s)
        )

    def _may_fetch(self, now: float, interval_s: float) -> bool:
        return self._last_attempt is None or now - self._last_attempt >= interval_s

    def _flight_for(self, key_id: str, now: float) -> _Flight:
        """The fetch a request for ``key_id`` (not in the cached set) waits on: the one in flight, or a new
        one when one may start. Called with the lock held.

        Raises:
            UnknownKeyId: ``key_id`` is remembered as unknown, or the cooldown forbids a refetch.
            KeySetUnavailable: no key set was ever fetched and the last try failed a moment ago.
        """
        until = self._unknown.get(key_id)
        if until is not None and now < until:
            raise UnknownKeyId(key_id)
        if self._flight is not None:
            return self._flight
        if self._fetched_at is None:
            if not self._may_fetch(now, min(RETRY_WITHOUT_KEYS_S, self._cooldown_s)):
                raise KeySetUnavailable("the signing keys could not be fetched")
        elif not self._may_fetch(now, self._cooldown_s):
            raise UnknownKeyId(key_id)
        return self._start_flight(now)

    def _start_flight(self, now: float) -> _Flight:
        """Start a fetch in a thread of its own, so that no request's wait depends on its timeout."""
        flight = _Flight()
        self._flight, self._last_attempt = flight, now
        threading.Thread(target=self._fetch, args=(flight,), name="jwks-fetch", daemon=True).start()
        return flight

    def _awaited(self, flight: _Flight, key_id: str) -> jwt.PyJWK:
        if not flight.done.wait(self._wait_s):
            raise KeySetUnavailable("the signing keys did not arrive in time")
        with self._lock:
            key = self._keys.get(key_id)
            if key is not None:
                return key
            if flight.failure is not None:
                raise KeySetUnavailable(flight.failure)
            self._remember_unknown(key_id, self._clock())
        raise UnknownKeyId(key_id)

    def _remember_unknown(self, key_id: str, now: float) -> None:
        self._unknown.pop(key_id, None)
        if len(self._unknown) >= MAX_UNKNOWN_KEY_IDS:
            self._unknown = {kid: until for kid, until in self._unknown.items() if until > now}
        while len(self._unknown) >= MAX_UNKNOWN_KEY_IDS:
            del self._unknown[next(iter(self._unknown))]
        self._unknown[key_id] = now + self._unknown_ttl_s

    def _fetch(self, flight: _Flight) -> None:
        """Fetch the key set and install it; whatever happens, release the requests waiting on it."""
        keys: dict[str, jwt.PyJWK] = {}
        failure: str | None = None
        try:
            keys = {key.key_id: key for key in self._client.get_signing_keys() if key.key_id}
        except jwt.PyJWKClientConnectionError:
            failure = "the signing keys could not be fetched"
        except (jwt.PyJWKClientError, jwt.PyJWKSetError, ValueError):
            failure = "the signing keys endpoint returned no usable key"
        except Exception:  # a thread of its own: its waiters must still hear the failure
            logger.exception("fetching the signing keys failed")
            failure = "the signing keys could not be fetched"
        if failure is not None:
            logger.warning("signing keys: %s", failure)
        with self._lock:
            if failure is None:
                self._keys, self._fetched_at = keys, self._clock()
                self._unknown = {kid: until for kid, until in self._unknown.items() if kid not in keys}
            flight.failure = failure
            self._flight = None
        flight.done.set()
