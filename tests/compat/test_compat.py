"""walflow's records against Debezium 3.6.3's, record by record, for every scenario and connector variant.

Each test is one connector pair (scenario, variant) of :mod:`tests.compat.scenarios`: both connectors' records
must be identical after :mod:`tests.compat.compare` set aside what it documents, and both must have produced
records at all (a scenario both sides ignore proves nothing).
"""

from __future__ import annotations

import pytest

from tests.compat.compare import Comparison, report
from tests.compat.scenarios import GROUPS

PAIRS = [(s.name, v.name) for group in GROUPS for s in group for v in s.variants]


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("scenario", "variant"), PAIRS, ids=[f"{s}-{v}" for s, v in PAIRS])
def test_identical_to_debezium(comparisons: dict[tuple[str, str], Comparison | str], scenario: str, variant: str) -> None:
    comparison = comparisons[(scenario, variant)]
    if isinstance(comparison, str):
        pytest.skip(comparison)
    assert comparison.error is None, comparison.error
    assert comparison.debezium_records > 0, f"Debezium emitted nothing for {scenario}/{variant}: the scenario tests nothing"
    assert not comparison.differences, report(f"{scenario}/{variant}", comparison)
