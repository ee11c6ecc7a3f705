"""The differential suite's session: every scenario runs once per session, in a few groups, before its tests.

The scenarios of :mod:`tests.compat.scenarios` are split into groups small enough for the embedded cluster's
replication slots (two per connector pair); each group's Debezium connectors run at the same time in the one JVM
of the session. The tests then only read the outcomes. The session's summary lists the record counts per scenario.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.compat.compare import HARNESS_RULES, Comparison, compare
from tests.compat.harness import Outcome, env_ready, run_group
from tests.compat.scenarios import GROUPS
from tests.requires import unavailable

_COUNTS: list[tuple[str, str, Comparison]] = []
_TIMING: dict[str, float] = {}


def _selected_pairs(session: pytest.Session) -> set[tuple[str, str]] | None:
    """The connector pairs (scenario, variant) the session's selected tests read; None when one of them reads every
    pair."""
    from tests.compat.test_compat import EXPECTED_RULES

    pairs: set[tuple[str, str]] = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "scenario" in params:
            pairs.add((params["scenario"], params["variant"]))
        elif item.name == "test_deliberate_differences_are_the_documented_ones":
            pairs.update(EXPECTED_RULES.values())
        elif "comparisons" in getattr(item, "fixturenames", ()):
            return None
    return pairs


@pytest.fixture(scope="session")
def compat_outcomes(request: pytest.FixtureRequest) -> Iterator[dict[tuple[str, str], Outcome | str]]:
    reason = env_ready()
    if reason:
        unavailable("the differential suite cannot run", reason)
    from tests.integration.test_types import _postgis_available

    # the PostGIS scenarios need the server's PostGIS package: installed from Debian's packages when missing
    _postgis_available()
    started = time.monotonic()
    outcomes: dict[tuple[str, str], Outcome | str] = {}
    selected = _selected_pairs(request.session)
    for group in GROUPS:
        # only the pairs the session's tests read: make test leaves the long pairs out, make test-long runs only
        # theirs; a scenario none of whose pairs is read is not set up at all
        if selected is not None:
            group = [replace(s, variants=[v for v in s.variants if (s.name, v.name) in selected]) for s in group]
            group = [s for s in group if s.variants]
        if group:
            outcomes.update(
                run_group(group, log=print if os.environ.get("WALFLOW_COMPAT_DEBUG") else lambda line: None)
            )
    _TIMING["seconds"] = time.monotonic() - started
    yield outcomes


@pytest.fixture(scope="session")
def comparisons(compat_outcomes: dict[tuple[str, str], Outcome | str]) -> dict[tuple[str, str], Comparison | str]:
    out: dict[tuple[str, str], Comparison | str] = {}
    for key, outcome in compat_outcomes.items():
        if isinstance(outcome, str):
            out[key] = outcome
            continue
        comparison = compare(outcome)
        out[key] = comparison
        _COUNTS.append((key[0], key[1], comparison))
    return out


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _COUNTS:
        return
    terminalreporter.section("walflow vs Debezium 3.6.3: records per scenario")
    header = ("scenario", "variant", "walflow", "Debezium", "identical", "set aside (deliberate differences)")
    rows = [header]
    for s, v, c in sorted(_COUNTS, key=lambda item: (item[0], item[1])):
        aside = ", ".join(f"{rule} {n}" for rule, n in sorted(c.rules.items()) if n and rule not in HARNESS_RULES)
        rows.append(
            (
                s,
                v,
                str(c.walflow_records),
                str(c.debezium_records),
                "yes" if not c.differences and not c.error else "NO",
                aside,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        terminalreporter.write_line("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
        if n == 0:
            terminalreporter.write_line("  ".join("-" * w for w in widths))
    total_w = sum(c.walflow_records for _, _, c in _COUNTS)
    total_d = sum(c.debezium_records for _, _, c in _COUNTS)
    terminalreporter.write_line(
        f"total: walflow {total_w}, Debezium {total_d} record(s) in {len(_COUNTS)} connector pair(s)"
        + (f", {_TIMING['seconds']:.0f} s" if "seconds" in _TIMING else "")
    )


_EXIT: dict[str, int] = {}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT["status"] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without finalising the interpreter once the Debezium JVM ran in this process.

    JPype shuts its JVM down at interpreter exit, while threads of the Kafka Connect runtime that Debezium's engines
    left behind may still call into Python objects being torn down: the process then ends with SIGSEGV (exit 139)
    after every test passed, which fails ``make test`` for no fault of the code. Everything pytest reports has been
    written by now, so the session's own status is kept and the finalisation skipped."""
    import sys

    jpype = sys.modules.get("jpype")
    if jpype is None or not jpype.isJVMStarted() or "status" not in _EXIT:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT["status"])
