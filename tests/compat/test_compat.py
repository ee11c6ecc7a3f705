"""walflow's records against Debezium 3.6.3's, record by record, for every scenario and connector variant.

Each test is one connector pair (scenario, variant) of :mod:`tests.compat.scenarios`: both connectors' records
must be identical after :mod:`tests.compat.compare` set aside what it documents, and both must have produced
records at all (a scenario both sides ignore proves nothing).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.compare import DELIBERATE, HARNESS_RULES, Comparison, report
from tests.compat.harness import NEEDS_VERSION
from tests.compat.scenarios import GROUPS, LONG_PAIRS
from tests.requires import unavailable
from tests.support import WHEEL_WITHOUT_POSTGIS, wheel_server

PAIRS = [(s.name, v.name) for group in GROUPS for s in group for v in s.variants]


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    ("scenario", "variant"),
    [pytest.param(s, v, marks=pytest.mark.long) if (s, v) in LONG_PAIRS else (s, v) for s, v in PAIRS],
    ids=[f"{s}-{v}" for s, v in PAIRS],
)
def test_identical_to_debezium(
    comparisons: dict[tuple[str, str], Comparison | str], scenario: str, variant: str
) -> None:
    comparison = comparisons[(scenario, variant)]
    if isinstance(comparison, str) and comparison.startswith(NEEDS_VERSION.split("{")[0]):
        pytest.skip(comparison)  # the version matrix runs it: not a dependency CI could lack
    if isinstance(comparison, str) and "postgis" in comparison and wheel_server():
        pytest.skip(WHEEL_WITHOUT_POSTGIS)
    if isinstance(comparison, str):
        unavailable(
            f"{scenario}/{variant} cannot run: {comparison}",
            "install the extension's Debian package (PostGIS: postgresql-15-postgis-3)",
        )
    assert comparison.error is None, comparison.error
    assert comparison.debezium_records > 0, (
        f"Debezium emitted nothing for {scenario}/{variant}: the scenario tests nothing"
    )
    assert not comparison.differences, report(f"{scenario}/{variant}", comparison)


#: Where each deliberate difference shows (a connector pair that must exercise it): docs/events.md's table
#: "Differences from Debezium" says why each is deliberate.
EXPECTED_RULES = {
    "heartbeat-count": ("snapshot", "heartbeat_txmeta"),
    "message-id-hash": ("basic", "txmeta"),
    "debezium-signal-table-events": ("incremental", "chunk2"),
    "incremental-keyless": ("incremental_filters", "conditions"),
    "multi-dimensional-arrays": ("types_stream", "defaults"),
    "walflow-bookkeeping": ("transactions", "txmeta"),
}


def test_deliberate_differences_are_the_documented_ones(comparisons: dict[tuple[str, str], Comparison | str]) -> None:
    """Each deliberate difference is seen where it is expected, and no other rule ever set anything aside."""
    assert set(EXPECTED_RULES) == set(DELIBERATE)
    for rule, pair in EXPECTED_RULES.items():
        comparison = comparisons[pair]
        assert isinstance(comparison, Comparison), comparison
        assert comparison.rules[rule] > 0, f"{rule} was not exercised by {pair}"
    used = {rule for c in comparisons.values() if isinstance(c, Comparison) for rule, n in c.rules.items() if n}
    assert used <= set(DELIBERATE) | HARNESS_RULES, used


def test_the_docs_list_every_deliberate_difference() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text()
    section = readme.split("## Differences from Debezium", 1)[1].split("\n## ", 1)[0]
    for rule in DELIBERATE:
        assert f"`{rule}`" in section, f"docs/events.md's 'Differences from Debezium' does not list {rule}"
