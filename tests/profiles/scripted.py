"""A scripted server for the client's profile tests: each answer written by hand from a
provider's documentation, never computed from a profile."""

from __future__ import annotations

from collections.abc import Callable

import httpx

Answer = httpx.Response | type[httpx.TransportError]


class Scripted:
    """A server that answers each non-GET request with the next scripted answer (then
    201s), answers GETs with `get` (or a 200 naming the path's last part), and keeps
    every request it saw."""

    def __init__(
        self, *answers: Answer, get: Callable[[httpx.Request], httpx.Response] | None = None
    ) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.get = get

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)  # a client's time probe: no Date here, nothing done
        request.read()
        self.requests.append(request)
        if request.method == "GET":
            if self.get is not None:
                return self.get(request)
            return httpx.Response(200, json={"id": request.url.path.rsplit("/", 1)[-1]})
        answer = self.answers.pop(0) if self.answers else httpx.Response(201, json={"id": "pay_1"})
        if isinstance(answer, type):
            raise answer("scripted", request=request)
        return answer

    @property
    def posts(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.method != "GET"]
