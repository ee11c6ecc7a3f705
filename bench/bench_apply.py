"""Lake apply benchmark: the Spark job applying real change events to Iceberg on ``local[2]``, against limits
measured in the same run. Prints one JSON line.

Phases (all by default, ``--phases`` picks some):

``throughput``
    a 1,000,000-row table snapshotted into Kafka and loaded by the job, then 1,000,000 changes (80% updates, 10%
    deletes, 10% inserts) streamed and applied; beside it: reading the same records alone (the job's own reader,
    same slices, same parallelism, nothing decoded), the MERGE alone (the same mix of changes already in memory,
    merged into a plain table of as many rows), a plain Iceberg append of as many rows, and one plain consumer.
``schemaless``
    the same with ``key/value.converter.schemas.enable: false`` (records about a tenth of the size).
``first-merge``
    the MERGE alone of the throughput phase's changes as the first MERGE of a fresh JVM (after an append of the
    table's rows, as the apply's MERGE follows the load's append): the like of the apply's MERGE, whose JVM has not
    compiled a MERGE's code yet, where the throughput phase's MERGE alone runs after the apply.
``scaling``
    a fixed batch of 10,000 changes (8,000 updates, 1,000 deletes, 1,000 inserts, keys spread over the whole table)
    applied into tables of 1,000,000 and 20,000,000 rows, each built through walflow (snapshot topic loaded by the
    job; records without schema part, so that the embedded broker, which keeps topics in memory, holds the large
    one), with the MERGE alone of the same batch into the same table measured beside it. Each is run twice
    (undone in between) and the faster counts, so that both sizes are compared with the JVM equally warm.

Each phase runs in a process and a Spark session (JVM) of its own, as each run of the lake job is a spark-submit of
its own; the broker is restarted between phases (the embedded broker never frees a topic's memory).

The applies and MERGEs of the throughput phases also report the CPU they used (:class:`CpuMeter`): the JVM's, the
part of it the JIT compilers took, and how many of the machine's cores were busy.

    python bench/bench_apply.py [--rows 1000000] [--large-rows 20000000] [--batch 10000] \\
        [--phases throughput,schemaless,first-merge,scaling]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from bench.workload import ROWS_SQL, TABLE
from tests.support import create_database, drop_database, pg_dsn
from walflow.airflow.lake import iceberg_runtime_jar, spark_conf
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.connector import ConnectorConfig, parse_config
from walflow.kafka import EventProducer, producer_settings
from walflow.lake.settings import LakeSettings
from walflow.lake.sql import TABLE_PROPERTIES

COLUMNS = ["id", "name", "price", "created", "active"]
META = "_walflow_op string, _walflow_lsn bigint, _walflow_source_ts_ms bigint, _walflow_applied_at timestamp"


def log(message: str) -> None:
    print(f"[bench-apply {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class CpuMeter:
    """The CPU a timed step used, read before and after it: the Spark JVM's own (utime + stime of its /proc entry;
    in local mode the executors are that JVM, the Python workers are not), the part the JVM's JIT compilers took
    (the CompilationMXBean's accumulated compile time, summed over compiler threads), and the machine's busy cores
    on average (/proc/stat: JVM, Python workers, broker and PostgreSQL together), against ``os.cpu_count()``."""

    def __init__(self, spark: Any) -> None:
        jvm = spark._jvm
        self._compilation = jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
        self._stat = f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/stat"
        self._tick = os.sysconf("SC_CLK_TCK")

    def _jvm_cpu(self) -> float:
        with open(self._stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime

    @staticmethod
    def _machine() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # all, idle + iowait

    def start(self) -> None:
        self._began = (
            time.perf_counter(),
            self._jvm_cpu(),
            self._compilation.getTotalCompilationTime(),
            self._machine(),
        )

    def figures(self) -> dict[str, float]:
        wall, jvm, jit, (total, idle) = self._began
        total2, idle2 = self._machine()
        return {
            "jvm_cpu_s": round(self._jvm_cpu() - jvm, 1),
            "jit_compile_s": round((self._compilation.getTotalCompilationTime() - jit) / 1000, 1),
            "busy_cores": round((os.cpu_count() or 1) * (1 - (idle2 - idle) / max(total2 - total, 1)), 2),
            "cores": os.cpu_count() or 1,
            "wall_s": round(time.perf_counter() - wall, 2),
        }


def bootstrap() -> str:
    return os.environ["WALFLOW_KAFKA_BOOTSTRAP"]


def restart_broker() -> None:
    """A fresh broker on the same port: the embedded broker keeps every topic in memory until it stops."""
    from sandbox.embedded import _ports, broker_down, broker_up

    broker_down()
    broker_up(_ports()["kafka"])


def producer() -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": bootstrap()}))


def start_spark(
    warehouse: str, config: ConnectorConfig, driver_memory: str, java_options: str = "", extra_conf: str = ""
) -> Any:
    """One local[2] session for the whole run (JVM start-up is not timed), with the stream DAG's catalog settings."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("walflow-bench-apply")
        .config("spark.jars", iceberg_runtime_jar() or "")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.showConsoleProgress", "false")
    )
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    for key, value in spark_conf(config).items():
        builder = builder.config(key, value)
    builder = builder.config(f"spark.sql.catalog.{LakeSettings.from_config(config).catalog}.warehouse", warehouse)
    for key, value in (json.loads(extra_conf) if extra_conf else {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def make_config(name: str, warehouse: str, schemas: bool) -> ConnectorConfig:
    return parse_config(
        {
            "name": name,
            "topic.prefix": name,
            "slot.name": name,
            "publication.name": name,
            "walflow.batch.max.events": 50_000_000,
            "walflow.batch.max.seconds": 7200,
            "walflow.lake.warehouse": warehouse,
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
        }
    )


def build_source(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute(ROWS_SQL, (1, rows))
        conn.execute("VACUUM ANALYZE bench")


def snapshot(config: ConnectorConfig, dsn: str, rows: int) -> float:
    prod = producer()
    started = time.perf_counter()
    report = ConnectorSetup(config, dsn, lambda: prod).run()
    assert report["snapshot"]["rows"] == rows, report["snapshot"]
    return time.perf_counter() - started


def stream_all(config: ConnectorConfig, dsn: str, expected: int) -> None:
    prod = producer()
    changes = 0
    while True:
        summary = StreamBatch(config, dsn, prod).run()
        changes += summary.events
        if summary.events == 0:
            break
    assert changes == expected, (changes, expected)


def bulk_changes(dsn: str, rows: int) -> int:
    """``rows`` changes: 80% updates, 10% deletes, 10% inserts (one statement, one transaction each)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE bench SET price = price + 1, active = NOT active WHERE id % 10 < 8")
        conn.execute("DELETE FROM bench WHERE id % 10 = 8")
        conn.execute(
            "INSERT INTO bench SELECT g, 'new-' || g, 1, timestamp '2025-01-01', true FROM generate_series(%s::bigint "
            "+ 1, %s::bigint * 11 / 10) g",
            (rows, rows),
        )
    return rows


def spread_changes(dsn: str, rows: int, batch: int) -> int:
    """``batch`` changes with keys spread over the whole table: 80% updates, 10% deletes, 10% inserts."""
    updates, deletes, inserts = batch * 8 // 10, batch // 10, batch - batch * 8 // 10 - batch // 10
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE bench SET price = price + 1, active = NOT active WHERE id IN (SELECT 1 + k * (%s::bigint / %s) "
            "FROM generate_series(0, %s - 1) k)",
            (rows, updates, updates),
        )
        # between the updated ids (step / 2 after one of them), so that no key is both updated and deleted
        conn.execute(
            "DELETE FROM bench WHERE id IN (SELECT 1 + %s / 2 + k * %s * 8 FROM generate_series(0, %s - 1) k)",
            (rows // updates, rows // updates, deletes),
        )
        conn.execute(
            "INSERT INTO bench SELECT g, 'new-' || g, 1, timestamp '2025-01-01', true FROM generate_series(%s::bigint "
            "+ 1, %s::bigint + %s) g",
            (rows, rows, inserts),
        )
    return updates + deletes + inserts


def source_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM bench").fetchone()[0])  # type: ignore[index]


def job(spark: Any, config: ConnectorConfig, max_records: int) -> Any:
    from walflow.lake.apply import LakeJob

    settings = LakeSettings.from_config(config).model_copy(update={"max_records": max_records})
    return LakeJob(spark, settings, {"bootstrap.servers": bootstrap()})


def apply(spark: Any, config: ConnectorConfig, max_records: int) -> tuple[float, dict[str, Any]]:
    lake_job = job(spark, config, max_records)
    topic = f"{config.topic_prefix}.public.bench"
    started = time.perf_counter()
    result = lake_job.apply_topic(topic, [0])
    return time.perf_counter() - started, result


def lake_table(config: ConnectorConfig) -> str:
    settings = LakeSettings.from_config(config)
    return f"{settings.catalog}.`{settings.namespace}`.public__bench"


def read_alone(spark: Any, topic: str, start: int, end: int) -> tuple[float, int]:
    """The job's reader over the same slices with the same parallelism, records counted and dropped: what reading
    alone costs (the broker's pace), without decoding."""
    from walflow.lake.positions import offset_slices
    from walflow.lake.reader import read_slice

    kafka = {"bootstrap.servers": bootstrap()}
    slices = offset_slices([(0, start, end)], spark.sparkContext.defaultParallelism)

    def count(tasks: Any) -> Any:
        for _topic, partition, begin, stop in tasks:
            n = 0
            for _record in read_slice(kafka, topic, partition, begin, stop):
                n += 1
            yield n

    started = time.perf_counter()
    records = sum(
        spark.sparkContext.parallelize([(topic, *s) for s in slices], len(slices)).mapPartitions(count).collect()
    )
    return time.perf_counter() - started, records


def one_consumer(topic: str, start: int) -> tuple[float, int, int]:
    """One plain consumer reading the records from ``start`` to the end and discarding them."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(),
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        records = size = 0
        began = time.perf_counter()
        while True:
            batch = consumer.consume(10000, 5)
            if not batch:
                raise RuntimeError(f"{topic}: no EOF")
            for msg in batch:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return time.perf_counter() - began, records, size
                    raise RuntimeError(msg.error().str())
                records += 1
                size += len(msg.value() or b"")
    finally:
        consumer.close()


def changes_frame(
    spark: Any, first: int, rows: int, spread: int | None = None, types: dict[str, str] | None = None
) -> Any:
    """The changes of :func:`bulk_changes` (``spread`` None) or :func:`spread_changes` (a batch of ``spread``), as
    rows already in memory, for the MERGE alone; ``types`` casts them to a table's column types."""
    if spread is None:
        frame = spark.range(first, first + rows).selectExpr(
            f"CASE WHEN id % 10 = 9 THEN id + {rows} ELSE id END AS id",
            "concat('name-', id) AS name",
            "CAST((id % 100000) / 100.0 + 1 AS decimal(12,2)) AS price",
            "CAST(timestamp_seconds(1704067200 + id) AS timestamp_ntz) AS created",
            "id % 2 = 1 AS active",
            "CASE WHEN id % 10 < 8 THEN 'u' WHEN id % 10 = 8 THEN 'd' ELSE 'c' END AS op",
        )
    else:
        updates, deletes = spread * 8 // 10, spread // 10
        frame = spark.range(spread).selectExpr(
            f"CASE WHEN id < {updates} THEN 1 + id * {rows // updates} WHEN id < {updates + deletes} THEN 1 + "
            f"{rows // updates // 2} + (id - {updates}) * {rows // updates * 8} ELSE {rows} + 1 + id - "
            f"{updates + deletes} END AS id",
            "concat('name-', id) AS name",
            "CAST(1.5 AS decimal(12,2)) AS price",
            "CAST(timestamp_seconds(1735689600) AS timestamp_ntz) AS created",
            "true AS active",
            f"CASE WHEN id < {updates} THEN 'u' WHEN id < {updates + deletes} THEN 'd' ELSE 'c' END AS op",
        )
    frame = frame.selectExpr("*", "id AS _walflow_lsn", "id AS _walflow_source_ts_ms").withColumnRenamed(
        "op", "_walflow_op"
    )
    if types:
        # a lake table typed from records without schema part: timestamps are microseconds, decimals base64 text
        frame = frame.selectExpr(*[_as_type(c, types[c]) if c in types else c for c in frame.columns])
    return frame.cache()


def _as_type(column: str, ddl: str) -> str:
    if ddl == "bigint" and column == "created":
        return f"unix_micros(CAST({column} AS timestamp)) AS {column}"
    return f"CAST({column} AS {ddl}) AS {column}"


def merge_alone(spark: Any, table: str, changes: Any, meter: CpuMeter | None = None) -> float:
    """The plain MERGE of ``changes`` (already in memory) into ``table``: matched and deleted, matched and updated,
    not matched and inserted (``meter`` started right before it)."""
    changes.count()
    view = f"bench_changes_{uuid.uuid4().hex[:6]}"
    changes.createOrReplaceTempView(view)
    columns = [*COLUMNS, "_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms"]
    statement = (
        f"MERGE INTO {table} t USING {view} s ON t.id = s.id WHEN MATCHED AND s._walflow_op = 'd' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET "
        + ", ".join(f"t.{c} = s.{c}" for c in columns)
        + ", t._walflow_applied_at = current_timestamp() "
        f"WHEN NOT MATCHED AND s._walflow_op <> 'd' THEN INSERT ({', '.join(columns)}, _walflow_applied_at) "
        f"VALUES ({', '.join('s.' + c for c in columns)}, current_timestamp())"
    )
    if meter is not None:
        meter.start()
    started = time.perf_counter()
    spark.sql(statement)
    return time.perf_counter() - started


def current_snapshot(spark: Any, table: str) -> int:
    return int(spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()[0][0])


def rollback(spark: Any, config: ConnectorConfig, snapshot_id: int) -> None:
    settings = LakeSettings.from_config(config)
    spark.sql(
        f"CALL {settings.catalog}.system.rollback_to_snapshot('`{settings.namespace}`.public__bench', {snapshot_id})"
    ).collect()


def plain_table(spark: Any, name: str, rows: int) -> str:
    """An empty table of the bench's shape with the lake's table properties, for the limits."""
    table = f"lake.bench_limits.{name}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench_limits")
    spark.sql(
        f"CREATE TABLE {table} (id bigint, name string, price decimal(12,2), created timestamp_ntz, active boolean, "
        f"{META}) USING iceberg TBLPROPERTIES ({TABLE_PROPERTIES})"
    )
    return table


def append_rows(spark: Any, table: str, rows: int) -> float:
    frame = (
        spark.range(1, rows + 1)
        .selectExpr(
            "id",
            "concat('name-', id) AS name",
            "CAST((id % 100000) / 100.0 AS decimal(12,2)) AS price",
            "CAST(timestamp_seconds(1704067200 + id) AS timestamp_ntz) AS created",
            "id % 2 = 0 AS active",
            "'r' AS _walflow_op",
            "id AS _walflow_lsn",
            "id AS _walflow_source_ts_ms",
            "current_timestamp() AS _walflow_applied_at",
        )
        .cache()
    )
    frame.count()  # materialised first: the append alone is timed
    started = time.perf_counter()
    frame.writeTo(table).append()
    seconds = time.perf_counter() - started
    frame.unpersist()
    return seconds


def lake_count(spark: Any, table: str) -> int:
    return int(spark.table(table).count())


# -- phases ----------------------------------------------------------------------------------------------
def throughput(spark: Any, warehouse: str, rows: int, schemas: bool) -> dict[str, Any]:
    """Load ``rows`` rows, then apply ``rows`` changes; the limits beside it."""
    label = "with schemas" if schemas else "without schemas"
    db = create_database("bench_apply")
    dsn = pg_dsn(db)
    config = make_config(f"bapply_{uuid.uuid4().hex[:6]}", warehouse, schemas)
    topic = f"{config.topic_prefix}.public.bench"
    try:
        build_source(dsn, rows)
        snapshot(config, dsn, rows)
        bulk_changes(dsn, rows)
        stream_all(config, dsn, rows)
        source_rows = source_count(dsn)
        log(f"throughput ({label}): {rows} rows and {rows} changes in Kafka")
        load_s, load = apply(spark, config, rows)
        assert load["records"] == rows, load
        log(f"throughput ({label}): loaded in {load_s:.1f} s")
        end = rows + rows + rows // 10  # snapshot, changes and the deletes' tombstones
        read_s, read_records = read_alone(spark, topic, rows, end)
        meter = CpuMeter(spark)
        meter.start()
        apply_s, applied = apply(spark, config, 10 * rows)
        apply_cpu = meter.figures()
        assert sum(applied["ops"].values()) == rows, applied
        log(f"throughput ({label}): applied in {apply_s:.1f} s {applied.get('timings')}")
        lake_rows = lake_count(spark, lake_table(config))
        # the limits: the MERGE alone of the same mix (in memory) into a plain table of as many rows, and the append
        table = plain_table(spark, f"merge_{uuid.uuid4().hex[:6]}", rows)
        append_s = append_rows(spark, table, rows)
        merge_s = merge_alone(spark, table, changes_frame(spark, 1, rows), meter)
        merge_cpu = meter.figures()
        result: dict[str, Any] = {
            "table_rows": rows,
            "change_events": rows,
            "ops": applied["ops"],
            "load_seconds": round(load_s, 2),
            "load_rows_per_s": round(rows / load_s),
            "apply_seconds": round(apply_s, 2),
            "apply_phases": applied.get("timings"),
            "apply_changes_per_s": round(rows / apply_s),
            "apply_cpu": apply_cpu,
            "read_alone_seconds": round(read_s, 2),
            "read_alone_records": read_records,
            "read_alone_records_per_s": round(read_records / read_s),
            "merge_only_seconds": round(merge_s, 2),
            "merge_only_changes_per_s": round(rows / merge_s),
            "merge_only_cpu": merge_cpu,
            "apply_over_read_plus_merge": round(apply_s / (read_s + merge_s), 3),
            "append_seconds": round(append_s, 2),
            "append_rows_per_s": round(rows / append_s),
            "apply_ratio_to_append": round(append_s / apply_s, 3),
            "lake_rows_equal_source": lake_rows == source_rows,
        }
        if schemas:
            one_s, one_records, one_bytes = one_consumer(topic, rows)
            result.update(
                {
                    "one_consumer_records_per_s": round(one_records / one_s),
                    "one_consumer_mb_per_s": round(one_bytes / 1e6 / one_s, 1),
                    "record_bytes": round(one_bytes / max(one_records, 1)),
                }
            )
        return result
    finally:
        drop_database(db)


def first_merge(spark: Any, rows: int) -> dict[str, Any]:
    """The throughput phase's MERGE alone as the first MERGE of this JVM, after an append of the table's rows (the
    apply's MERGE follows the load's append the same way)."""
    table = plain_table(spark, f"first_{uuid.uuid4().hex[:6]}", rows)
    append_s = append_rows(spark, table, rows)
    meter = CpuMeter(spark)
    merge_s = merge_alone(spark, table, changes_frame(spark, 1, rows), meter)
    log(f"first-merge: {rows} changes merged in {merge_s:.1f} s")
    return {
        "table_rows": rows,
        "append_seconds": round(append_s, 2),
        "merge_only_seconds": round(merge_s, 2),
        "merge_only_cpu": meter.figures(),
    }


def scaling(spark: Any, warehouse: str, sizes: list[int], batch: int) -> dict[str, Any]:
    """The same batch of ``batch`` spread changes into tables of each size: the job's apply and the MERGE alone."""
    out: dict[str, Any] = {"batch": batch, "tables": []}
    for rows in sizes:
        db = create_database("bench_scale")
        dsn = pg_dsn(db)
        config = make_config(f"bscale_{uuid.uuid4().hex[:6]}", warehouse, schemas=False)
        try:
            build_source(dsn, rows)
            snapshot_s = snapshot(config, dsn, rows)
            log(f"scaling: {rows} rows snapshotted in {snapshot_s:.0f} s")
            load_s, load = apply(spark, config, rows)
            assert load["records"] == rows, load
            log(f"scaling: {rows} rows loaded into the lake in {load_s:.0f} s")
            table = lake_table(config)
            before = current_snapshot(spark, table)
            # the MERGE alone: the same batch, in memory, merged into the same table; twice, undone each time
            types = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}
            merge_runs = []
            for _ in range(2):
                merge_runs.append(merge_alone(spark, table, changes_frame(spark, 1, rows, spread=batch, types=types)))
                rollback(spark, config, before)
            changes = spread_changes(dsn, rows, batch)
            stream_all(config, dsn, changes)
            # the job's apply of the same batch, twice: the second after undoing the first (the lake's history then
            # leads back to the load's offsets, so it reads and applies the batch again); the first pays for the
            # JVM's compilation of code the load did not run
            apply_runs = []
            for attempt in range(2):
                apply_s, applied = apply(spark, config, 10 * rows)
                assert sum(applied["ops"].values()) == changes, applied
                apply_runs.append((apply_s, applied))
                if attempt == 0:
                    rollback(spark, config, before)
            equal = lake_count(spark, table) == source_count(dsn)
            apply_s, applied = min(apply_runs, key=lambda run: run[0])
            merge_s = min(merge_runs)
            log(
                f"scaling: {batch} changes into {rows} rows: apply {[round(a, 2) for a, _r in apply_runs]} s "
                f"{applied.get('timings')}, MERGE alone {[round(m, 2) for m in merge_runs]} s"
            )
            out["tables"].append(
                {
                    "table_rows": rows,
                    "snapshot_rows_per_s": round(rows / snapshot_s),
                    "load_rows_per_s": round(rows / load_s),
                    "apply_seconds": round(apply_s, 2),
                    "apply_runs_seconds": [round(a, 2) for a, _r in apply_runs],
                    "apply_phases": applied.get("timings"),
                    "merge_only_seconds": round(merge_s, 2),
                    "merge_only_runs_seconds": [round(m, 2) for m in merge_runs],
                    "lake_rows_equal_source": equal,
                }
            )
        finally:
            drop_database(db)
            restart_broker()
    small, large = out["tables"][0], out["tables"][-1]
    out["apply_large_over_small"] = round(large["apply_seconds"] / small["apply_seconds"], 2)
    out["merge_only_large_over_small"] = round(large["merge_only_seconds"] / small["merge_only_seconds"], 2)
    return out


def run_phase(phase: str, args: argparse.Namespace) -> dict[str, Any]:
    """One phase in this process's own Spark session (JVM start-up not timed)."""
    warehouse = tempfile.mkdtemp(prefix="walflow-bench-apply-")
    spark = start_spark(
        warehouse, make_config("bench", warehouse, True), args.driver_memory, args.java_options, args.spark_conf
    )
    try:
        restart_broker()
        if phase == "throughput":
            return throughput(spark, warehouse, args.rows, schemas=True)
        if phase == "schemaless":
            return throughput(spark, warehouse, args.rows, schemas=False)
        if phase == "first-merge":
            return first_merge(spark, args.rows)
        if phase == "scaling":
            return scaling(spark, warehouse, [args.rows, args.large_rows], args.batch)
        raise SystemExit(f"unknown phase {phase!r}")
    finally:
        spark.stop()
        shutil.rmtree(warehouse, ignore_errors=True)
        restart_broker()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--large-rows", type=int, default=20_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--phases", default="throughput,schemaless,first-merge,scaling")
    parser.add_argument("--phase", default="", help=argparse.SUPPRESS)  # one phase, in this process (internal)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--java-options", default="", help="the driver JVM's options (local mode: the executors' too)")
    parser.add_argument("--spark-conf", default="", help="more Spark settings, as a JSON object")
    args = parser.parse_args()
    if args.phase:
        result = run_phase(args.phase, args)
        result["driver_python_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print("BENCH_PHASE " + json.dumps(result))
        return
    # Each phase runs in a process (and a JVM) of its own, as each run of the lake job is a spark-submit of its own:
    # no phase profits from code another one compiled.
    figures: dict[str, Any] = {"bench": "apply", "master": "local[2]"}
    started = time.perf_counter()
    for phase in [p.strip() for p in args.phases.split(",") if p.strip()]:
        command = [
            sys.executable,
            __file__,
            "--phase",
            phase,
            "--rows",
            str(args.rows),
            "--large-rows",
            str(args.large_rows),
            "--batch",
            str(args.batch),
            "--driver-memory",
            args.driver_memory,
            f"--java-options={args.java_options}",
            f"--spark-conf={args.spark_conf}",
        ]
        result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        lines = [line for line in result.stdout.splitlines() if line.startswith("BENCH_PHASE ")]
        if result.returncode != 0 or not lines:
            sys.exit(f"phase {phase} failed (exit {result.returncode})")
        figures[phase] = json.loads(lines[-1].split(" ", 1)[1])
    if "throughput" in figures:
        figures["apply_changes_per_s"] = figures["throughput"]["apply_changes_per_s"]
        figures["apply_over_read_plus_merge"] = figures["throughput"]["apply_over_read_plus_merge"]
    if "throughput" in figures and "first-merge" in figures:
        # against a MERGE alone whose JVM, like the apply's, runs its first MERGE
        throughput = figures["throughput"]
        figures["apply_over_read_plus_first_merge"] = round(
            throughput["apply_seconds"]
            / (throughput["read_alone_seconds"] + figures["first-merge"]["merge_only_seconds"]),
            3,
        )
    if "schemaless" in figures:
        figures["schemaless_apply_changes_per_s"] = figures["schemaless"]["apply_changes_per_s"]
    if "scaling" in figures:
        figures["scaling_apply_large_over_small"] = figures["scaling"]["apply_large_over_small"]
        figures["scaling_merge_only_large_over_small"] = figures["scaling"]["merge_only_large_over_small"]
    figures["seconds"] = round(time.perf_counter() - started)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
