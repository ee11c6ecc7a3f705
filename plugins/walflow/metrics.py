"""Debezium's streaming and snapshot metrics, computed from one task's work.

Debezium exposes these as JMX MBean attributes of a long-running connector; a walflow task is one bounded
batch, so each run computes them for its own work, logs them, returns them in the task's XCom, and the Airflow
adapter sends the numeric ones through Airflow's metrics (``walflow.<connector>.<metric>``). The names are the
reference's attribute names so that dashboards can be carried over.
"""

from __future__ import annotations

import time
from typing import Any


def streaming_metrics(summary: Any, now_ms: int | None = None) -> dict[str, Any]:
    """The reference's streaming metrics for one :class:`walflow.stream.BatchSummary`."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    last = summary.last_event_commit_ms
    return {
        "Connected": True,
        "TotalNumberOfEventsSeen": summary.events + summary.filtered,
        "NumberOfEventsFiltered": summary.filtered,
        "NumberOfCommittedTransactions": summary.transactions,
        "TotalNumberOfCreateEventsSeen": summary.ops.get("c", 0),
        "TotalNumberOfUpdateEventsSeen": summary.ops.get("u", 0),
        "TotalNumberOfDeleteEventsSeen": summary.ops.get("d", 0),
        # how far the newest event of the batch was behind its commit when the batch ended
        "MilliSecondsBehindSource": max(0, now_ms - last) if last is not None else 0,
        "MilliSecondsSinceLastEvent": max(0, now_ms - last) if last is not None else None,
        "SourceEventPosition": {"lsn": summary.last_lsn, "confirmed": summary.advanced_to},
        "CapturedTables": sorted(summary.events_per_topic),
        "RetainedWalBytes": summary.retained_wal_bytes,
        "LagBytes": summary.lag_bytes,
        "IncrementalSnapshotRowsScanned": summary.snapshot_rows,
        "BatchSeconds": summary.seconds,
    }


def snapshot_metrics(report: dict[str, Any]) -> dict[str, Any]:
    """The reference's snapshot metrics from a setup report's ``snapshot`` part."""
    snapshot = report.get("snapshot") or {}
    ran = bool(snapshot.get("ran"))
    tables = snapshot.get("tables") or []
    return {
        "SnapshotRunning": False,
        "SnapshotCompleted": ran,
        "SnapshotAborted": False,
        "SnapshotSkipped": not ran,
        "TotalTableCount": len(tables),
        "RemainingTableCount": 0,
        "CapturedTables": tables,
        "RowsScanned": dict(snapshot.get("rows_per_table") or {}),
        "TotalNumberOfEventsSeen": snapshot.get("rows", 0),
        "SnapshotDurationInSeconds": snapshot.get("seconds", 0.0),
    }


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics a StatsD/OpenTelemetry gauge can carry (booleans as 0/1, nested values left out)."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, (int, float)):
            out[name] = float(value)
    return out
