"""Lake apply benchmark: 1,000,000 change events (80% updates, 10% inserts, 10% deletes) applied by the Spark job
to a 1,000,000-row Iceberg table on ``local[2]``, against two limits measured in the same run: a plain Iceberg
append of as many rows, and the MERGE alone (the same mix of changes, already in memory, merged into that table);
plus one plain consumer reading the same records from the broker.

The events are real: the table is snapshotted and the changes streamed from PostgreSQL by walflow. Prints one
JSON line.

    python bench/bench_apply.py [--rows 1000000]
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

from bench.workload import TABLE  # noqa: E402
from tests.support import create_database, drop_database, pg_dsn  # noqa: E402
from walflow.airflow.lake import iceberg_runtime_jar, spark_conf  # noqa: E402
from walflow.config import parse_config  # noqa: E402
from walflow.kafka import EventProducer, producer_settings  # noqa: E402
from walflow.lake.settings import LakeSettings  # noqa: E402
from walflow.setup import ConnectorSetup  # noqa: E402
from walflow.stream import StreamBatch  # noqa: E402



def producer() -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}))


def kafka_read(topic: str, start: int) -> tuple[float, int, int]:
    """One consumer reading the change records (from offset ``start`` to the end) and discarding them: the
    Kafka side of the limit (every record carries its schema, ~3 kB)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"], "group.id": f"bench-{uuid.uuid4().hex[:6]}",
         "enable.partition.eof": True, "enable.auto.commit": False, "fetch.max.bytes": 64 * 1024 * 1024}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        records = size = 0
        began = time.perf_counter()
        while True:
            batch = consumer.consume(10000, 5)
            if not batch:
                raise RuntimeError(f"{topic}: no EOF")
            done = False
            for msg in batch:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        done = True
                        break
                    raise RuntimeError(msg.error().str())
                records += 1
                size += len(msg.value() or b"")
            if done:
                return time.perf_counter() - began, records, size
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    n = args.rows
    db = create_database("bench_apply")
    dsn = pg_dsn(db)
    name = f"bapply_{uuid.uuid4().hex[:6]}"
    warehouse = tempfile.mkdtemp(prefix="walflow-bench-apply-")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
            conn.execute(
                "INSERT INTO bench SELECT g, 'name-' || g, (g %% 100000) / 100.0, timestamp '2024-01-01' + g * interval '1 second', "
                "g %% 2 = 0 FROM generate_series(1, %s::bigint) g",
                (n,),
            )
        config = parse_config(
            {
                "name": name, "topic.prefix": name, "slot.name": name, "publication.name": name,
                "walflow.batch.max.events": 10 * n, "walflow.batch.max.seconds": 3600, "walflow.lake.warehouse": warehouse,
            }
        )
        prod = producer()
        report = ConnectorSetup(config, dsn, lambda: prod).run()
        assert report["snapshot"]["rows"] == n, report["snapshot"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            # 80% updates, 10% deletes, 10% inserts: n change events
            conn.execute("UPDATE bench SET price = price + 1, active = NOT active WHERE id % 10 < 8")
            conn.execute("DELETE FROM bench WHERE id % 10 = 8")
            conn.execute("INSERT INTO bench SELECT g, 'new-' || g, 1, timestamp '2025-01-01', true FROM generate_series(%s::bigint + 1, %s::bigint * 11 / 10) g", (n, n))
            (source_rows,) = conn.execute("SELECT count(*) FROM bench").fetchone()  # type: ignore[misc]
        changes = 0
        while True:
            summary = StreamBatch(config, dsn, prod).run()
            changes += summary.events
            if summary.events == 0:
                break
        assert changes == n, changes

        read_s, read_records, read_bytes = kafka_read(f"{name}.public.bench", n)

        command = ["spark-submit", "--master", args.master, "--driver-memory", "6g", "--jars", iceberg_runtime_jar() or ""]
        for key, value in spark_conf(config).items():
            command += ["--conf", f"{key}={value}"]
        settings = LakeSettings.from_config(config).model_dump_json()
        command += [str(ROOT / "bench" / "spark_apply_bench.py"), "--settings", settings, "--bootstrap", os.environ["WALFLOW_KAFKA_BOOTSTRAP"], "--load", str(n), "--changes", str(n)]
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}"})
        if result.returncode != 0:
            useful = [line for line in result.stderr.splitlines() if " INFO " not in line and " WARN " not in line]
            sys.exit(f"spark job failed (exit {result.returncode}):\n" + "\n".join(useful[-60:]) + "\n" + result.stdout[-2000:])
        for phase in (line for line in result.stderr.splitlines() if "walflow.apply" in line):
            print(phase, file=sys.stderr)
        line = next(l for l in result.stdout.splitlines() if l.startswith("BENCH_APPLY "))
        spark = json.loads(line.split(" ", 1)[1])
        assert spark["lake_rows"] == source_rows, (spark["lake_rows"], source_rows)
        apply_rate = n / spark["apply_s"]
        append_rate = n / spark["append_s"]
        print(
            json.dumps(
                {
                    "bench": "apply",
                    "master": args.master,
                    "table_rows": n,
                    "change_events": n,
                    "ops": spark["ops"],
                    "load_seconds": round(spark["load_s"], 2),
                    "load_rows_per_s": round(n / spark["load_s"]),
                    "apply_seconds": round(spark["apply_s"], 2),
                    "apply_phases": spark["apply_timings"],
                    "apply_changes_per_s": round(apply_rate),
                    "append_seconds": round(spark["append_s"], 2),
                    "append_rows_per_s": round(append_rate),
                    "apply_ratio_to_append": round(apply_rate / append_rate, 3),
                    "merge_only_seconds": round(spark["merge_s"], 2),
                    "merge_only_changes_per_s": round(n / spark["merge_s"]),
                    "apply_ratio_to_merge_only": round(apply_rate / (n / spark["merge_s"]), 3),
                    "kafka_read_records": read_records,
                    "kafka_read_records_per_s": round(read_records / read_s),
                    "kafka_read_mb_per_s": round(read_bytes / 1e6 / read_s, 1),
                    "lake_rows_equal_source": spark["lake_rows"] == source_rows,
                    "spark_job_seconds": round(time.perf_counter() - started, 1),
                }
            )
        )
    finally:
        drop_database(db)
        subprocess.run(["rm", "-rf", warehouse])


if __name__ == "__main__":
    main()
