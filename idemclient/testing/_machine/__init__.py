"""The phase machine: one request in, one answer out, its state kept by the storage.

`core` runs a payment through admission and the five phases, takes over stale
leases, recovers and reaps; `external` simulates the two external systems it calls;
`faults` scripts what goes wrong and when; `webhooks` delivers the events finished
resources queue; `records` are the values a test reads back; `clock` is what the
machine needs of a clock; `control` answers the `/_sandbox/` endpoints.

It builds on the protocol's rules (`.._protocol`) and the storage (`.._backend` and
the row types in `.._rows`), and knows nothing of sockets, httpx or ASGI: the
adapters (`.._adapters`) bring requests to it through `ReferenceServer.handle`.
"""
