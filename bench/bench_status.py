"""The walflow page's route: how long ``GET /walflow/api/status`` (every connector at a glance, what the overview page
reads) and ``GET /walflow/api/status/<name>`` (one connector with its last 24 hours) take for 10 connectors.

Ten connectors on one source database, each set up and streamed a few batches (so each has a slot, a last batch and a
history), their Connection from the environment as Airflow reads it. The routes are called in this process through
FastAPI's test client: the same application the API server mounts, with its sign-in and per-DAG permission replaced by
an allowed user (they are Airflow's, not walflow's cost). The physical limit, measured in the same run: opening one
connection to the source and reading the slot's row, ten times over, serially; the route reads ten connectors in
parallel, so it can be below ten times that.

Prints one JSON line.

    python bench/bench_status.py [--connectors 10] [--requests 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from tests.support import create_database, drop_database, pg_dsn
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.files import load_config
from walflow.kafka import EventProducer, producer_settings


def producer() -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}))


def timed(call: Any, times: int) -> list[float]:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        took.append((time.perf_counter() - started) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connectors", type=int, default=10)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    db = create_database("bench_status")
    dsn = pg_dsn(db)
    folder = Path(tempfile.mkdtemp(prefix="walflow-bench-status-"))
    params = dict(p.split("=", 1) for p in dsn.split())
    os.environ["AIRFLOW_CONN_BENCH_STATUS_PG"] = json.dumps(
        {"conn_type": "postgres", "host": params["host"], "port": int(params["port"]), "login": params["user"],
         "password": params["password"], "schema": params["dbname"]}
    )  # fmt: skip
    os.environ["WALFLOW_CONNECTORS_DIR"] = str(folder)
    names = [f"bs{i}_{db[-8:]}" for i in range(args.connectors)]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name in names:
                conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        for name in names:
            (folder / f"{name}.yaml").write_text(
                f"name: {name}\ntopic.prefix: {name}\nslot.name: {name}\npublication.name: {name}\n"
                f"table.include.list: public.{name}\nsnapshot.mode: no_data\nwalflow.lake.enabled: false\n"
                "walflow.postgres.conn.id: bench_status_pg\n"
            )
            config = load_config(folder / f"{name}.yaml")
            ConnectorSetup(config, dsn, producer).run()
            for batch in range(3):
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(
                        f"INSERT INTO {name} SELECT g, 'x' FROM generate_series({batch * 100}, {batch * 100 + 99}) g"
                    )
                StreamBatch(config, dsn, producer()).run()

        from fastapi.testclient import TestClient

        import walflow.airflow.ui as ui

        ui.app.dependency_overrides[ui._signed_in] = lambda: object()
        ui._may_read = lambda user, connector: True  # Airflow's permission check: the auth manager's, not walflow's
        client = TestClient(ui.app)

        def everything() -> dict[str, Any]:
            response = client.get("/api/status")
            assert response.status_code == 200, response.text
            return dict(response.json())

        def one() -> dict[str, Any]:
            response = client.get(f"/api/status/{names[0]}")
            assert response.status_code == 200, response.text
            return dict(response.json())

        first = everything()
        listed = {c["connector"]: c for c in first["connectors"]}
        assert set(names) <= set(listed), sorted(listed)
        assert all(listed[n]["source"]["exists"] and listed[n]["source"]["last_batch"] for n in names)
        assert len(one()["source"]["history"]) == 3
        overview_ms = timed(everything, args.requests)
        connector_ms = timed(one, args.requests)

        def read_slots_serially() -> None:
            for name in names:
                with psycopg.connect(dsn) as conn:
                    conn.execute("SELECT * FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone()

        limit_ms = timed(read_slots_serially, 10)
        median = statistics.median(overview_ms)
        result = {
            "bench": "status",
            "connectors": args.connectors,
            "requests": args.requests,
            "overview_ms_median": round(median, 1),
            "overview_ms_p95": round(sorted(overview_ms)[int(0.95 * (len(overview_ms) - 1))], 1),
            "connector_ms_median": round(statistics.median(connector_ms), 1),
            "limit_slot_reads_serial_ms_median": round(statistics.median(limit_ms), 1),
            "overview_over_limit": round(median / statistics.median(limit_ms), 2),
            "states": sorted({listed[n]["state"] for n in names}),
            "target_ms": 500,
            "meets_target": median < 500,
        }
        print(json.dumps(result))
    finally:
        drop_database(db)


if __name__ == "__main__":
    main()
