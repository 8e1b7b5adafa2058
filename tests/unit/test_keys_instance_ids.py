"""Orchestration instance ids fit Durable Task's limit (1 to 100 characters) for every order key intake
accepts and any attempt, stay readable when they fit, and stay unique and deterministic."""

from __future__ import annotations

import re

import pytest

from orderflow.clients import CLIENT_ID_PATTERN
from orderflow.messages.fields import ORDER_KEY_PATTERN
from orderflow.records.keys import MAX_INSTANCE_ID_CHARS, instance_id_for, order_key, parse_instance_id

pytestmark = pytest.mark.unit

LONGEST_KEY = order_key("c" * 32, "O" * 64)
ATTEMPTS = (1, 9, 10, 99, 100, 12345, 10**9, 2**63)


def test_the_longest_key_intake_accepts_is_a_valid_key() -> None:
    assert re.fullmatch(ORDER_KEY_PATTERN, LONGEST_KEY)
    assert re.fullmatch(CLIENT_ID_PATTERN, "c" * 32)
    assert len(LONGEST_KEY) == 97


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_every_attempt_of_the_longest_key_fits_and_keeps_its_attempt(attempt: int) -> None:
    instance_id = instance_id_for(LONGEST_KEY, attempt)
    assert 1 <= len(instance_id) <= MAX_INSTANCE_ID_CHARS
    assert not instance_id.startswith("@")
    assert not set(instance_id) & set("/\\#?")
    assert instance_id == instance_id_for(LONGEST_KEY, attempt)
    assert parse_instance_id(instance_id)[1] == attempt


def test_an_instance_id_that_fits_is_the_readable_form() -> None:
    assert instance_id_for("acme:o-1", 3) == "acme:o-1:3"
    assert parse_instance_id("acme:o-1:3") == ("acme:o-1", 3)
    assert instance_id_for(LONGEST_KEY, 99) == f"{LONGEST_KEY}:99"


def test_long_keys_and_attempts_give_distinct_ids() -> None:
    keys = [LONGEST_KEY, order_key("c" * 32, "O" * 63 + "P"), order_key("c" * 31 + "d", "O" * 64)]
    ids = {instance_id_for(key, attempt) for key in keys for attempt in ATTEMPTS}
    assert len(ids) == len(keys) * len(ATTEMPTS)
    # every attempt of one order shares one stem, so the order's instances sort together
    stems = {parse_instance_id(instance_id_for(LONGEST_KEY, attempt))[0] for attempt in (100, 10**9)}
    assert len(stems) == 1
    assert LONGEST_KEY.startswith(stems.pop()[:40])
