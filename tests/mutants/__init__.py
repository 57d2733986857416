"""Semantic mutants of the client's decision points, and the runner of `make mutants`.

Each mutant (`catalog.MUTANTS`) is one plausible bug, named and described by the
behaviour it breaks, written as an exact piece of code (its anchor, found exactly once
in the tree) and what replaces it. The runner (`run.py`) applies each to a scratch copy
of the tree, never to the working tree, and runs the behavioural tests that kill it
against that copy: the checker's histories, tests through the public API against the
reference server or a scripted transport, the batch command end to end; never the unit
tests of the function mutated alone. A mutant the tests do not kill fails the run.

When the code moves, an anchor is no longer found and the runner stops at once,
naming the mutant ("anchor not found: <name>"): whoever moved the code moves the
mutant with it (the behaviour it breaks says what to look for).
"""
