"""The reference's metric names computed from a batch summary and a setup report."""

from __future__ import annotations

from walflow.metrics import numeric, snapshot_metrics, streaming_metrics
from walflow.stream import BatchSummary


def test_streaming_metrics_from_a_batch() -> None:
    summary = BatchSummary(connector="c", slot="s", events=5, filtered=2, transactions=3, last_lsn="0/10", advanced_to="0/20")
    summary.ops = {"c": 3, "u": 1, "d": 1}
    summary.events_per_topic = {"c.public.b": 2, "c.public.a": 3}
    summary.last_event_commit_ms = 1_000
    metrics = streaming_metrics(summary, now_ms=1_250)
    assert metrics["TotalNumberOfEventsSeen"] == 7 and metrics["NumberOfEventsFiltered"] == 2
    assert (metrics["TotalNumberOfCreateEventsSeen"], metrics["TotalNumberOfUpdateEventsSeen"], metrics["TotalNumberOfDeleteEventsSeen"]) == (3, 1, 1)
    assert metrics["MilliSecondsBehindSource"] == 250 and metrics["CapturedTables"] == ["c.public.a", "c.public.b"]
    assert metrics["SourceEventPosition"] == {"lsn": "0/10", "confirmed": "0/20"}
    gauges = numeric(metrics)
    assert gauges["Connected"] == 1.0 and "SourceEventPosition" not in gauges and "CapturedTables" not in gauges


def test_an_idle_batch_is_not_behind() -> None:
    metrics = streaming_metrics(BatchSummary(connector="c", slot="s"), now_ms=5)
    assert metrics["MilliSecondsBehindSource"] == 0 and metrics["MilliSecondsSinceLastEvent"] is None


def test_snapshot_metrics_from_a_setup_report() -> None:
    report = {"snapshot": {"ran": True, "tables": ["public.a"], "rows_per_table": {"public.a": 10}, "rows": 10, "seconds": 0.5}}
    metrics = snapshot_metrics(report)
    assert metrics["SnapshotCompleted"] and not metrics["SnapshotSkipped"] and metrics["RowsScanned"] == {"public.a": 10}
    assert snapshot_metrics({"snapshot": {"ran": False}})["SnapshotSkipped"]
