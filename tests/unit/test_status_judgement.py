"""The one judgement of a connector (walflow.airflow.status.problems) that walflow status, the UI page and the monitor
DAG share: each state from what the status gathered, and messages that name connector, slot, figure and limit."""

from __future__ import annotations

from typing import Any

from tests.support import connector
from walflow.airflow.status import STATES, incremental_progress, lake_behind, problems

NOW = 1_800_000_000_000
CONFIG = connector("judged", **{"walflow.monitor.max.lake.records.behind": "100"})


def judged(**parts: Any) -> list[tuple[str, str]]:
    source = {"slot": "judged", "exists": True, "active": False, "warnings": [], "error": None}
    source.update(parts.pop("source", {}))
    result = {"connector": "judged", "checked_at_ms": NOW, "source": source, **parts}
    return [(p["state"], p["reason"]) for p in problems(result, CONFIG)]


def test_a_connector_that_streams_is_flowing() -> None:
    assert judged(source={"seconds_since_last_batch": 30}) == []


def test_each_problem_has_its_state_and_names_connector_figure_and_limit() -> None:
    warning = "slot 'judged' retains 5000 bytes of WAL, above walflow.slot.max.retained.wal.bytes=1000: ..."
    assert judged(source={"seconds_since_last_batch": 30, "warnings": [warning]}) == [
        ("behind", f"connector 'judged': {warning}")
    ]
    ((state, reason),) = judged(source={"seconds_since_last_batch": 7200})
    assert state == "stopped" and "no stream batch succeeded for 7200 s (slot 'judged' inactive)" in reason
    assert "walflow.monitor.max.seconds.since.batch=3600" in reason and reason.startswith("connector 'judged': ")
    ((state, reason),) = judged(source={"reachable": False, "error": "SourceUnavailableError: refused"})
    assert state == "failing" and "cannot be reached: SourceUnavailableError: refused" in reason
    ((state, _),) = judged(source={"seconds_since_last_batch": 5, "error": "slot 'judged' has wal_status=lost"})
    assert state == "failing"


def test_a_connector_never_streamed_is_stopped_only_once_its_setup_is_older_than_the_limit() -> None:
    recent = {"status": "skipped", "at_ms": NOW - 60_000}
    assert judged(source={"snapshot": recent}) == []
    assert judged(source={"snapshot": {"status": "running", "started_ms": NOW - 9_000_000}}) == []
    ((state, reason),) = judged(source={"snapshot": {"status": "completed", "completed_ms": NOW - 4_000_000}})
    assert state == "stopped" and "no stream batch recorded 4000 s after its setup" in reason


def test_airflow_and_lake_parts() -> None:
    dags = {"stream": {"dag_id": "judged__stream", "paused": True, "last_run": {"run_id": "r1", "state": "failed"}}}
    found = judged(source={"seconds_since_last_batch": 10}, dags=dags)
    assert [s for s, _ in found] == ["stopped", "failing"] and "judged__stream is paused" in found[0][1]
    lake = {"tables": [{"table": "judged.public__t", "records_behind": 150}], "kafka_error": "KafkaException: x"}
    found = judged(source={"seconds_since_last_batch": 10}, lake=lake)
    assert ("behind", "connector 'judged': lake table judged.public__t is 150 record(s) behind its topics, above "
            "walflow.monitor.max.lake.records.behind=100") in found  # fmt: skip
    assert any(s == "failing" and "broker cannot be reached" in r for s, r in found)
    assert STATES[0] == "failing" and STATES[-1] == "flowing"


def test_records_behind_and_snapshot_progress() -> None:
    tables: list[dict[str, Any]] = [
        {"table": "a", "offsets": {"t.a": {0: 10, 1: 4}}},
        {"table": "b", "offsets": {}},
    ]
    lake_behind(tables, {"t.a": {0: 15, 1: 4, 2: 3}})
    assert tables[0]["records_behind"] == 5 + 0 + 3 and "records_behind" not in tables[1]
    progress = incremental_progress(
        {"signal_id": "s1", "tables": ["public.c", "public.d"], "rows_per_table": {"public.b": 5, "public.c": 2},
         "rows": 7, "chunks": 3, "queued": [{"signal_id": "s2", "tables": ["public.e"]}]}
    )  # fmt: skip
    assert progress is not None
    assert (progress["tables_done"], progress["tables_total"], progress["current_table"]) == (1, 3, "public.c")
    assert progress["queued"] == [{"signal": "s2", "tables": ["public.e"]}] and incremental_progress(None) is None
