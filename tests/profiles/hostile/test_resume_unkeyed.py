"""An operation recorded by a client that keyed its request, resumed by one that would
send that request as a plain one (another policy's methods, a profile that says its
server takes no key there): sent unkeyed, unrecorded, it would be sent again at every
resume. It is not sent; its outcome says why."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from idemclient import Client, NotSent, RetryPolicy, State, profiles
from idemclient.profiles import Endpoint

from ..scripted import Scripted


def test_a_method_the_policy_no_longer_keys_is_not_resumed(make: Callable[..., Client]) -> None:
    server = Scripted(httpx.ConnectError)
    first = make(server, "generic", policy=RetryPolicy(max_attempts=1))
    with pytest.raises(NotSent):
        first.patch("/payments/p1", json={"amount": 1}, operation_id="op-1")
    later = make(server, "generic", policy=RetryPolicy(methods=frozenset({"POST"})))
    for _ in range(2):
        (outcome,) = later.resume()
        assert outcome.state is State.NOT_SENT
        assert "plain request" in outcome.evidence
    assert len(server.posts) == 1


def test_an_endpoint_the_profile_no_longer_keys_is_not_resumed(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.ReadTimeout)
    mine = profiles.generic.replace(name="mine")
    first = make(server, mine, policy=RetryPolicy(max_attempts=1))
    with pytest.raises(Exception, match="indeterminate"):
        first.post("/v1/refunds", json={"amount": 1}, operation_id="r-1")
    unkeyed = mine.replace(endpoints=(Endpoint("/v1/refunds", keyed=False),))
    later = make(server, unkeyed)
    (outcome,) = later.resume()
    assert outcome.state is State.INDETERMINATE
    assert "plain request" in outcome.evidence
    assert len(server.posts) == 1
