"""Debezium's streaming and snapshot metrics, computed from one task's work.

Debezium exposes these as JMX MBean attributes of a long-running connector; a walflow task is one bounded
batch, so each run computes them for its own work, logs them, returns them in the task's XCom, and the Airflow
adapter sends the numeric ones through Airflow's metrics (``walflow.<connector>.<kind>.<metric>``). The names are the
reference's attribute names so that dashboards can be carried over.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import orjson

#: Longest error text carried by a metrics record (the full error is in the task log).
MAX_ERROR_CHARS = 300


def last_event(summary: Any) -> str | None:
    """The reference's ``LastEvent``: a short description of the last event of the batch.

    Uses the batch's own record of it when the stream provides one (``summary.last_event``: op, table, LSN), and
    otherwise describes the last transaction that produced events (its commit LSN and time).
    """
    recorded = getattr(summary, "last_event", None)
    if isinstance(recorded, dict) and recorded:
        parts = [f"op={recorded.get('op')}", f"table={recorded.get('table')}", f"lsn={recorded.get('lsn')}"]
        if recorded.get("ts_ms") is not None:
            parts.append(f"committed={_iso(recorded['ts_ms'])}")
        return " ".join(parts)
    if isinstance(recorded, str) and recorded:
        return recorded
    if summary.last_lsn is None:
        return None
    committed = f" committed={_iso(summary.last_event_commit_ms)}" if summary.last_event_commit_ms is not None else ""
    return f"transaction lsn={summary.last_lsn}{committed}"


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def streaming_metrics(
    summary: Any, now_ms: int | None = None, captured_tables: list[str] | None = None
) -> dict[str, Any]:
    """The reference's streaming metrics for one :class:`walflow.capture.batches.BatchSummary`.

    :param captured_tables: ``schema.table`` of every table the connector captures (its filters and publication,
        see :func:`walflow.source.publication.captured_tables`), whether or not this batch saw events of it; when
        ``None``, ``summary.captured_tables`` if the batch recorded them.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    last = summary.last_event_commit_ms
    if captured_tables is None:
        captured_tables = list(getattr(summary, "captured_tables", None) or [])
    return {
        "Connected": True,
        "BatchFailed": False,
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
        "CapturedTables": sorted(captured_tables),
        "LastEvent": last_event(summary),
        "RetainedWalBytes": summary.retained_wal_bytes,
        "LagBytes": summary.lag_bytes,
        "IncrementalSnapshotRowsScanned": summary.snapshot_rows,
        "BatchSeconds": summary.seconds,
    }


def failed_streaming_metrics(error: BaseException) -> dict[str, Any]:
    """What a stream task that failed reports: no position moved, and why (shortened; the log has the rest)."""
    from walflow.errors import SourceError

    text = f"{type(error).__name__}: {error}"
    return {
        # a source that could not be reached is the one failure that means "not connected"
        "Connected": not (isinstance(error, SourceError) and "cannot connect" in str(error)),
        "BatchFailed": True,
        "LastError": text[:MAX_ERROR_CHARS],
    }


def snapshot_metrics(
    report: dict[str, Any] | None, *, error: BaseException | None = None, started: bool = False
) -> dict[str, Any]:
    """The reference's snapshot metrics from a setup report's ``snapshot`` part, or for a setup that failed.

    A setup task reports when it has ended, so ``SnapshotRunning`` is false here; while a snapshot runs, the
    operator sends ``SnapshotRunning`` = 1 as it starts (:func:`snapshot_started_metrics`). A run that failed
    after starting its snapshot reports ``SnapshotAborted``.

    :param report: the setup's report (``None`` when it failed before producing one).
    :param error: the exception the setup failed with, if it failed.
    :param started: whether the failed run had started its snapshot (then the snapshot was aborted).
    """
    snapshot = (report or {}).get("snapshot") or {}
    ran = bool(snapshot.get("ran"))
    tables = snapshot.get("tables") or []
    failed = error is not None
    metrics: dict[str, Any] = {
        "SnapshotRunning": False,
        "SnapshotCompleted": ran and not failed,
        "SnapshotAborted": failed and started,
        "SnapshotSkipped": not ran and not failed,
        "SnapshotFailed": failed,
        "TotalTableCount": len(tables),
        "RemainingTableCount": 0 if ran and not failed else len(tables),
        "CapturedTables": tables,
        "RowsScanned": dict(snapshot.get("rows_per_table") or {}),
        "TotalNumberOfEventsSeen": snapshot.get("rows", 0),
        "SnapshotDurationInSeconds": snapshot.get("seconds", 0.0),
    }
    if failed:
        metrics["LastError"] = f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS]
    return metrics


def snapshot_started_metrics(table_count: int) -> dict[str, Any]:
    """Sent when a setup run starts its snapshot, so a dashboard sees it running."""
    return {
        "SnapshotRunning": True,
        "SnapshotCompleted": False,
        "SnapshotAborted": False,
        "TotalTableCount": table_count,
        "RemainingTableCount": table_count,
    }


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics a StatsD/OpenTelemetry gauge can carry (booleans as 0/1, nested values left out)."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, (bool, int, float)):
            out[name] = float(value)
    return out


def metrics_line(metrics: dict[str, Any]) -> str:
    """The metrics as one readable log line: ``Name=value`` pairs in the reference's order; lists and nested values
    as compact JSON, text quoted only when it holds a space."""
    parts = []
    for name, value in metrics.items():
        if isinstance(value, (dict, list, tuple)):
            text = orjson.dumps(value).decode()
        elif isinstance(value, str):
            text = repr(value) if (" " in value or not value) else value
        else:
            text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        parts.append(f"{name}={text}")
    return " ".join(parts)
