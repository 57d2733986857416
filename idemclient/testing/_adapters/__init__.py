"""The ways into the reference server: each turns its own world's request into a
`ServerRequest`, calls `ReferenceServer.handle`, and turns the answer back.

`transport`: an httpx transport (sync, async, respx), in-process; `asgi`: an ASGI
application; `live`: uvicorn on a loopback socket, in a thread (`serve`) or a child
process (`spawn`); `sandbox`: the `/_sandbox/` API from the other side of a socket;
`cli`: the `idemclient server` command. The pytest fixtures are in
`idemclient._pytest_plugin`, the module the pytest11 entry point names, outside this
package so that a pytest run that uses no fixture never imports it.
"""
