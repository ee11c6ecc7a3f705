"""The reference's metric names computed from a batch summary and a setup report."""

from __future__ import annotations

import logging

from tests.requires import unavailable
from walflow.capture.batches import BatchSummary
from walflow.capture.metrics import (
    failed_streaming_metrics,
    numeric,
    snapshot_metrics,
    snapshot_started_metrics,
    streaming_metrics,
)
from walflow.errors import DeliveryError, SourceError


def test_streaming_metrics_from_a_batch() -> None:
    summary = BatchSummary(
        connector="c", slot="s", events=5, filtered=2, transactions=3, last_lsn="0/10", advanced_to="0/20"
    )
    summary.ops = {"c": 3, "u": 1, "d": 1}
    summary.events_per_topic = {"c.public.b": 2, "c.public.a": 3}
    summary.last_event_commit_ms = 1_000
    # CapturedTables lists what the connector captures, including tables without events in this batch
    metrics = streaming_metrics(summary, now_ms=1_250, captured_tables=["public.b", "public.a", "public.idle"])
    assert metrics["TotalNumberOfEventsSeen"] == 7 and metrics["NumberOfEventsFiltered"] == 2
    assert (
        metrics["TotalNumberOfCreateEventsSeen"],
        metrics["TotalNumberOfUpdateEventsSeen"],
        metrics["TotalNumberOfDeleteEventsSeen"],
    ) == (3, 1, 1)
    assert metrics["MilliSecondsBehindSource"] == 250 and metrics["CapturedTables"] == [
        "public.a",
        "public.b",
        "public.idle",
    ]
    assert metrics["SourceEventPosition"] == {"lsn": "0/10", "confirmed": "0/20"}
    assert metrics["LastEvent"] == "transaction lsn=0/10 committed=1970-01-01T00:00:01.000+00:00"
    gauges = numeric(metrics)
    assert gauges["Connected"] == 1.0 and gauges["BatchFailed"] == 0.0
    assert "SourceEventPosition" not in gauges and "CapturedTables" not in gauges and "LastEvent" not in gauges


def test_last_event_uses_the_batch_record_when_there_is_one() -> None:
    summary = BatchSummary(connector="c", slot="s", last_lsn="0/10")
    summary.last_event = {"op": "u", "table": "public.a", "lsn": "0/F", "ts_ms": 0}  # type: ignore[attr-defined]
    assert (
        streaming_metrics(summary, now_ms=5)["LastEvent"]
        == "op=u table=public.a lsn=0/F committed=1970-01-01T00:00:00.000+00:00"
    )


def test_an_idle_batch_is_not_behind() -> None:
    metrics = streaming_metrics(BatchSummary(connector="c", slot="s"), now_ms=5)
    assert metrics["MilliSecondsBehindSource"] == 0 and metrics["MilliSecondsSinceLastEvent"] is None
    assert metrics["LastEvent"] is None and metrics["CapturedTables"] == []


def test_snapshot_metrics_from_a_setup_report() -> None:
    report = {
        "snapshot": {
            "ran": True,
            "tables": ["public.a"],
            "rows_per_table": {"public.a": 10},
            "rows": 10,
            "seconds": 0.5,
        }
    }
    metrics = snapshot_metrics(report)
    assert (
        metrics["SnapshotCompleted"] and not metrics["SnapshotSkipped"] and metrics["RowsScanned"] == {"public.a": 10}
    )
    assert snapshot_metrics({"snapshot": {"ran": False}})["SnapshotSkipped"]


def test_failed_runs_report_aborted_and_failed() -> None:
    error = DeliveryError("Kafka at 'x:1' is unreachable")
    failed = failed_streaming_metrics(error)
    assert failed["BatchFailed"] and failed["Connected"] and "unreachable" in failed["LastError"]
    assert not failed_streaming_metrics(SourceError("cannot connect to the source database: refused"))["Connected"]
    aborted = snapshot_metrics(None, error=error, started=True)
    assert (
        aborted["SnapshotAborted"]
        and aborted["SnapshotFailed"]
        and not aborted["SnapshotCompleted"]
        and not aborted["SnapshotRunning"]
    )
    before_start = snapshot_metrics(None, error=error, started=False)
    assert (
        not before_start["SnapshotAborted"] and before_start["SnapshotFailed"] and not before_start["SnapshotSkipped"]
    )
    assert snapshot_started_metrics(3) == {
        "SnapshotRunning": True,
        "SnapshotCompleted": False,
        "SnapshotAborted": False,
        "TotalTableCount": 3,
        "RemainingTableCount": 3,
    }


class FakeStats:
    """Stands in for Airflow's Stats: records every gauge sent."""

    def __init__(self) -> None:
        self.gauges: dict[str, float] = {}
        self.tags: dict[str, dict[str, str]] = {}

    def gauge(self, name: str, value: float, *, tags: dict[str, str] | None = None) -> None:
        self.gauges[name] = value
        self.tags[name] = dict(tags or {})


def test_gauges_are_named_per_connector_and_the_log_has_the_metrics_line() -> None:
    try:
        import airflow  # noqa: F401
    except ImportError:
        unavailable("Airflow is not installed", "make venv installs it (requirements.txt)")
    from walflow.airflow.operators import publish_metrics

    summary = BatchSummary(
        connector="shop", slot="s", events=4, transactions=2, last_lsn="0/10", last_event_commit_ms=1_000
    )
    summary.ops = {"c": 4}
    metrics = streaming_metrics(summary, now_ms=2_000, captured_tables=["public.orders"])
    stats = FakeStats()
    # a logger standing in for the task's (self.log), with a handler of its own: independent of how Airflow
    # configured logging in this process
    logger = logging.getLogger("tests.task_log")
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.disabled = False
    try:
        returned = publish_metrics("shop", "streaming", metrics, logger, stats=stats, tags={"env": "prod"})
    finally:
        logger.removeHandler(handler)
    assert returned is metrics
    assert stats.gauges == {f"walflow.shop.streaming.{name}": value for name, value in numeric(metrics).items()}
    assert stats.gauges["walflow.shop.streaming.TotalNumberOfCreateEventsSeen"] == 4.0
    assert stats.gauges["walflow.shop.streaming.MilliSecondsBehindSource"] == 1000.0
    # custom.metric.tags on every gauge
    assert set(stats.tags) == set(stats.gauges) and all(t == {"env": "prod"} for t in stats.tags.values())
    (line,) = [line for line in lines if line.startswith("connector shop streaming metrics: ")]
    # one readable line: Name=value pairs, lists and structures as compact JSON, no Python dict
    assert 'CapturedTables=["public.orders"]' in line and "TotalNumberOfCreateEventsSeen=4 " in line
    assert "{'" not in line and "\n" not in line
