"""Swapping the transports of a built httpx client (`idemclient._retrofit`), checked
against httpx's own routing: `make httpx-releases` runs this file, with the tests of
`wrap()`, under every httpx release that pyproject.toml allows."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

import idemclient
from idemclient._retrofit import replace_transports, transport_of

PACKAGE = Path(idemclient.__file__).parent


class Recorder(httpx.BaseTransport):
    """Stands in front of a transport and answers itself: which one a request reached."""

    def __init__(self, inner: httpx.BaseTransport, seen: list[tuple[str, object]]) -> None:
        self.inner = inner
        self.seen = seen

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host, self.inner))
        return httpx.Response(200)


class AsyncRecorder(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, seen: list[tuple[str, object]]) -> None:
        self.inner = inner
        self.seen = seen

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host, self.inner))
        return httpx.Response(200)


def answer(request: httpx.Request) -> httpx.Response:
    raise AssertionError("a replaced transport was called")  # pragma: no cover


def test_the_default_transport_is_the_one_given() -> None:
    default = httpx.MockTransport(answer)
    with httpx.Client(transport=default) as client:
        assert transport_of(client) is default
    adefault = httpx.MockTransport(answer)
    assert transport_of(httpx.AsyncClient(transport=adefault)) is adefault


def test_the_default_and_every_mount_are_replaced() -> None:
    default, other = httpx.MockTransport(answer), httpx.MockTransport(answer)
    seen: list[tuple[str, object]] = []
    client = httpx.Client(
        transport=default, mounts={"http://other.test": other, "http://direct.test": None}
    )
    replace_transports(client, lambda inner: Recorder(inner, seen))
    assert isinstance(transport_of(client), Recorder)
    for host in ("main.test", "other.test", "direct.test"):
        assert client.get(f"http://{host}/").status_code == 200
    # A mount of None means the default transport, which is now the replaced one.
    assert seen == [("main.test", default), ("other.test", other), ("direct.test", default)]
    client.close()


@pytest.mark.anyio
async def test_the_default_and_every_mount_of_an_async_client_are_replaced() -> None:
    default, other = httpx.MockTransport(answer), httpx.MockTransport(answer)
    seen: list[tuple[str, object]] = []
    client = httpx.AsyncClient(
        transport=default, mounts={"http://other.test": other, "http://direct.test": None}
    )
    replace_transports(client, lambda inner: AsyncRecorder(inner, seen))
    assert isinstance(transport_of(client), AsyncRecorder)
    for host in ("main.test", "other.test", "direct.test"):
        assert (await client.get(f"http://{host}/")).status_code == 200
    assert seen == [("main.test", default), ("other.test", other), ("direct.test", default)]
    await client.aclose()


def test_proxies_from_the_environment_are_replaced_and_no_proxy_keeps_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # httpx mounts a proxy transport per scheme from the environment, and records each
    # NO_PROXY host as a mount of None. Nothing is sent: the recorder answers itself.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "direct.test")
    seen: list[tuple[str, object]] = []
    with httpx.Client() as client:
        default = transport_of(client)
        replace_transports(client, lambda inner: Recorder(inner, seen))
        client.get("http://direct.test/")
        client.get("http://elsewhere.test/")
    assert seen[0] == ("direct.test", default)
    host, proxied = seen[1]
    assert host == "elsewhere.test"
    assert proxied is not default
    assert isinstance(proxied, httpx.HTTPTransport)


def test_a_client_whose_httpx_keeps_its_transports_elsewhere_is_refused_untouched(
    tmp_path: Path,
) -> None:
    default = httpx.MockTransport(answer)
    client = httpx.Client(transport=default)
    del client._mounts  # as a release that moved it would look
    with pytest.raises(RuntimeError, match=re.escape(f"this is httpx {httpx.__version__}")):
        replace_transports(client, lambda inner: Recorder(inner, []))
    with pytest.raises(RuntimeError, match="_transport` and `_mounts`"):
        idemclient.wrap(client, store=tmp_path / "store.db")
    assert vars(client)["_transport"] is default
    assert "send" not in vars(client)  # wrap() changed nothing before refusing


def test_only_the_retrofit_module_touches_httpx_private_attributes() -> None:
    reaching = re.compile(r"[\w)\]]\._(?:transport|mounts)\b")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reaching.search(line)
    ]
    assert found == [
        f"_retrofit.py:{number}"
        for number, line in enumerate((PACKAGE / "_retrofit.py").read_text().splitlines(), 1)
        if reaching.search(line)
    ]
    assert found  # the pattern does find the accesses there
