"""How a request finds its route in the operator API's one table (operator_api.routing, operator_api.routes),
and how a refusal is answered (operator_api.answers.Refused)."""

from __future__ import annotations

import json

import pytest

from operator_api.answers import Refused
from operator_api.routes import ROUTES
from operator_api.routing import API_PREFIX, Route, match

pytestmark = pytest.mark.unit

VALUES = {"{orderId}": "a:o-1", "{queue}": "orders-a", "{deadLetterId}": "d-1", "{*file}": "index.html"}


def concrete(route: Route) -> str:
    """A path of ``route``'s template, its variables given values."""
    return API_PREFIX + "/" + "/".join(VALUES.get(segment, segment) for segment in route.segments)


def refusal(method: str, path: str) -> Refused:
    with pytest.raises(Refused) as refused:
        match(ROUTES, method, path)
    return refused.value


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: f"{route.method} {route.path}")
def test_every_route_is_found_by_its_method_and_a_path_of_its_template(route: Route) -> None:
    found, params = match(ROUTES, route.method.lower(), concrete(route))

    assert found is route
    assert params == {name: VALUES["{" + name + "}"] for name in route.variables} | (
        {"file": "index.html"} if route.path.endswith("{*file}") else {}
    )


def test_a_literal_segment_wins_over_a_variable_only_for_the_method_it_takes() -> None:
    purge = f"{API_PREFIX}/deadletters/orders-a/purge"

    assert match(ROUTES, "POST", purge)[0].name == "deadletters.purge"
    assert match(ROUTES, "GET", purge) == (
        next(r for r in ROUTES if r.name == "deadletters.show"),
        {"queue": "orders-a", "deadLetterId": "purge"},
    )
    other = refusal("PUT", purge)  # the 405 names the general route, as the variable one answers any id
    assert (other.status, other.headers, other.message) == (
        405,
        {"Allow": "GET"},
        "deadletters.show takes GET",
    )


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/operator", 404),
        ("/api/operator/", 404),
        ("/api/operator/orders/", 404),
        ("/api/operator/orders/a:o-1/", 404),
        ("/api/operator/orders/a:o-1%2Freview", 405),  # one segment: the order route, which takes GET
        ("/api/operator/deadletters//d-1", 404),
        ("/api/other/orders", 404),
    ],
)
def test_paths_that_fit_no_template_are_404_and_an_encoded_slash_makes_no_segment(
    path: str, status: int
) -> None:
    refused = refusal("POST", path)

    assert refused.status == status
    assert refused.code == ("NoSuchRoute" if status == 404 else "MethodNotAllowed")


def test_a_segment_is_decoded_after_the_split_and_the_rest_of_a_console_path_is_kept_as_sent() -> None:
    assert match(ROUTES, "GET", f"{API_PREFIX}/orders/a%3Ao-1")[1] == {"orderId": "a:o-1"}
    assert match(ROUTES, "GET", f"{API_PREFIX}/console/%2e%2e/handler.py")[1] == {"file": "%2e%2e/handler.py"}
    assert match(ROUTES, "GET", f"{API_PREFIX}/console/")[1] == {"file": ""}


def test_a_refusal_is_answered_in_the_error_shape_with_its_headers() -> None:
    refused = Refused(
        409,
        "AlreadyReplayed",
        "gone",
        etag='"abc"',
        retry_after_s=1,
        headers={"Allow": "POST"},
        details={"replayed": {"by": "otto"}},
    )

    answer = refused.response()

    assert answer.status == 409
    assert answer.headers == {"ETag": '"abc"', "Retry-After": "1", "Allow": "POST"}
    assert json.loads(answer.content()) == {
        "error": {"code": "AlreadyReplayed", "message": "gone", "replayed": {"by": "otto"}}
    }
    assert Refused(412, "PreconditionFailed", "stale", etag="abc").response().headers == {"ETag": '"abc"'}
