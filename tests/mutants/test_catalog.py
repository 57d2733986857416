"""The mutation suite's catalog is current: every mutant's anchor is found exactly once
in the tree and the mutated file compiles (`make mutants` runs the mutants themselves).
When the code moves, this says which mutant to move with it."""

from __future__ import annotations

import pytest

from .catalog import MUTANTS, Mutant
from .run import WIDE, check_anchors


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_mutant_still_applies(mutant: Mutant) -> None:
    check_anchors((mutant,))


def test_names_are_unique_and_killers_are_behavioural() -> None:
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert len(MUTANTS) >= 25
    for mutant in MUTANTS:
        assert mutant.killers, mutant.name
        for killer in mutant.killers:
            # Behavioural tests only: never the unit tests of the function mutated.
            assert killer.startswith(WIDE), (mutant.name, killer)
