"""Slot health against the real server: retained WAL, confirmed lag, time since the last confirmed position,
judged against limits, and shown by `walflow status`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.privileges import as_connector
from tests.support import connector, setup, stream, unique
from walflow.admin.cli import render
from walflow.airflow.status import status
from walflow.source.connection import connect
from walflow.source.health import HealthLimits, assess_slot_health, pending_wal_bytes, slot_health
from walflow.source.pgoutput import str_to_lsn
from walflow.source.state import StateStore


def write(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, %s) g ON CONFLICT (id) DO UPDATE SET v ="
            " EXCLUDED.v || 'y'",
            (rows,),
        )


def state_of(dsn: str, config: Any) -> dict[str, Any]:
    with connect(as_connector(dsn)) as conn:
        store = StateStore(conn, config.name, config.state_table)
        return {"last_batch": store.get("last_batch")}


def test_slot_health_follows_writes_and_batches(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = connector(unique("health"), **{"snapshot.mode": "no_data"})
    setup(config, database)  # creates the state table the stream records its batches in
    with connect(as_connector(database)) as conn:
        fresh = slot_health(conn, config.slot_name, state_of(database, config))
    assert fresh.exists and fresh.seconds_since_confirmed is None  # no batch has confirmed anything yet

    write(database, 2000)
    with connect(as_connector(database)) as conn:
        behind = slot_health(conn, config.slot_name)
        assert behind.confirmed_lag_bytes is not None and behind.confirmed_lag_bytes > 400_000
        assert behind.retained_wal_bytes is not None and behind.retained_wal_bytes >= behind.confirmed_lag_bytes
        # the same lag, measured a moment later: plus whatever WAL the server wrote in between (other test lanes
        # write theirs meanwhile), which the position read right after bounds
        pending = pending_wal_bytes(conn, config.slot_name)
        (later,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()  # type: ignore[misc]
        written_since = str_to_lsn(later) - str_to_lsn(behind.current_wal_lsn)
        assert behind.confirmed_lag_bytes <= pending <= behind.confirmed_lag_bytes + written_since
    warnings, error = assess_slot_health(behind, HealthLimits(warn_lag_bytes=100_000, fail_retained_wal_bytes=10**12))
    assert error is None and any("bytes behind the server" in w for w in warnings)

    before = int(time.time() * 1000)
    summary = stream(config, database)
    assert summary.events == 2000
    with connect(as_connector(database)) as conn:
        caught_up = slot_health(conn, config.slot_name, state_of(database, config))
    # WAL is the whole server's, and the other test lanes write theirs meanwhile: what the slot still lags behind
    # must all be WAL written after the 2000 rows (by the batch's bookkeeping or by other lanes); the rows are confirmed
    written_to = str_to_lsn(behind.current_wal_lsn)  # the server's position just after the rows
    now = str_to_lsn(caught_up.current_wal_lsn)
    assert caught_up.confirmed_lag_bytes is not None and caught_up.confirmed_lag_bytes <= now - written_to
    assert str_to_lsn(caught_up.confirmed_to) >= written_to
    assert caught_up.confirmed_to == summary.advanced_to
    assert caught_up.confirmed_at_ms is not None and caught_up.confirmed_at_ms >= before
    assert caught_up.seconds_since_confirmed is not None and 0 <= caught_up.seconds_since_confirmed < 60
    # the same record, judged an hour later, is stale
    with connect(as_connector(database)) as conn:
        later = slot_health(
            conn, config.slot_name, state_of(database, config), now_ms=caught_up.confirmed_at_ms + 3_600_000
        )
    warnings, _ = assess_slot_health(later, HealthLimits(warn_seconds_since_confirmed=600))
    assert later.seconds_since_confirmed == 3600.0 and any("3600 s ago" in w for w in warnings)


def test_status_shows_health_and_limits(database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    name = unique("stat")
    folder = tmp_path
    (folder / f"{name}.yaml").write_text(
        f"name: {name}\ntopic.prefix: {name}\nslot.name: {name}\npublication.name: {name}\n"
        "walflow.lake.enabled: false\nwalflow.slot.max.retained.wal.bytes: 1000\nsnapshot.mode: no_data\n"
    )
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(folder))
    config = connector(name, **{"snapshot.mode": "no_data"})
    setup(config, database)
    write(database, 200)
    stream(config, database)
    write(database, 200)  # retained WAL above the (tiny) limit again
    report = status(name, dsn=as_connector(database))
    source = report["source"]
    assert source["exists"] and source["seconds_since_confirmed"] is not None and source["retained_wal_bytes"] > 1000
    assert (
        any("retains" in w and "walflow.slot.max.retained.wal.bytes=1000" in w for w in source["warnings"])
        and source["error"] is None
    )
    assert report["state"] == "behind" and report["problems"][0]["reason"].startswith(f"connector {name!r}: slot")
    text = render(report)
    assert "last confirmed" in text and "s ago" in text and f"behind: connector {name!r}: slot" in text
    # the command's exit status, for monitoring: 0 with warnings only, 1 once the slot is gone
    from walflow.admin.cli import main

    assert main(["status", name, "--dsn", as_connector(database)]) == 0
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (config.slot_name,))
    assert main(["status", name, "--dsn", as_connector(database)]) == 1


def test_batch_history_is_a_bounded_ring(database: str) -> None:
    """Every batch adds its line to the connector's history, in the same statement as its record; the history keeps
    the last walflow.status.history.batches lines, and a history made smaller since drops the rest at its next
    turn."""
    from walflow.capture.batches import HISTORY_PREFIX, batch_history

    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = connector(unique("ring"), **{"snapshot.mode": "no_data", "walflow.status.history.batches": "3"})
    setup(config, database)

    def history() -> list[dict[str, Any]]:
        with connect(as_connector(database)) as conn:
            store = StateStore(conn, config.name, config.state_table)
            assert len(store.prefixed(HISTORY_PREFIX)) == len(batch_history(store))
            return batch_history(store)

    for batch in range(1, 8):
        write(database, 10 * batch)
        summary = stream(config, database)
        lines = history()
        assert [line["number"] for line in lines] == list(range(max(1, batch - 2), batch + 1))
        assert lines[-1]["events"] == summary.events and lines[-1]["advanced_to"] == summary.advanced_to
    assert len(history()) == 3
    smaller = config.model_copy(update={"walflow_status_history_batches": 2})
    stream(smaller, database)  # batch 8: 8 % 2 == 0, a turn of the smaller ring
    assert [line["number"] for line in history()] == [7, 8]
    # what walflow status and the UI page show of it: the lines of the last hours, oldest first
    report = status_of(config, database)
    assert [line["number"] for line in report["source"]["history"]] == [7, 8]


def status_of(config: Any, database: str) -> dict[str, Any]:
    from walflow.airflow.status import connector_status

    return connector_status(config, dsn=as_connector(database), history_hours=1, lake=False)
