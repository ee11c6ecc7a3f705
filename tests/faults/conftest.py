"""The fault suite's report: one table of scenarios at the end of the session."""

from __future__ import annotations

from typing import Any

from tests.faults.harness import RESULTS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    header = ("scenario", "iterations", "changes written", "changes found", "duplicates", "result")
    rows = [header] + [
        tuple(str(r[k]) for k in ("scenario", "iterations", "written", "found", "duplicates", "result"))
        for r in RESULTS
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    terminalreporter.section("walflow fault scenarios")
    for n, row in enumerate(rows):
        terminalreporter.write_line("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
        if n == 0:
            terminalreporter.write_line("  ".join("-" * w for w in widths))
