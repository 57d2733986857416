"""The protocol layer: the server half's rules, pure values in and out.

`rules`: which keys, tokens and bodies are acceptable, what the request hash (the
fingerprint) covers, what an existing key row means for a new arrival, and which phase
runs next. `storable`: the text and nesting every storage backend keeps alike, which
a request is held to before anything of it is stored. `messages`: the request and
answer values every adapter hands to the server and takes back. Nothing here touches
storage, a clock, a socket or httpx; the layers above (storage, the phase machine, the
adapters) import from here, never the other way round.
"""
