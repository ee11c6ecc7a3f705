"""The Spark side of ``bench_apply.py`` (run with spark-submit): time the lake job's load and apply, a plain
Iceberg append of the same number of rows and the MERGE alone, all in one Spark session so that JVM start-up is
not counted.

Prints ``BENCH_APPLY {json}`` on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins")]

from walflow.lake.apply import LakeJob  # noqa: E402
from walflow.lake.settings import LakeSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", required=True, help="the connector's LakeSettings as JSON")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--load", type=int, required=True, help="events of the initial snapshot")
    parser.add_argument("--changes", type=int, required=True, help="change events after it")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)

    settings = LakeSettings.from_argument(args.settings)
    prefix = settings.topic_prefix

    def run(max_records: int) -> tuple[float, dict]:
        job = LakeJob(spark, settings.model_copy(update={"max_records": max_records}), {"bootstrap.servers": args.bootstrap})
        topic = f"{prefix}.public.bench"
        start = time.perf_counter()
        result = job.apply_topic(topic, [0])
        return time.perf_counter() - start, result

    load_s, load = run(args.load)
    assert load["records"] == args.load, load
    apply_s, applied = run(10 * args.changes)  # the rest of the topic: the changes and the deletes' tombstones
    assert sum(applied["ops"].values()) == args.changes, applied
    table = f"lake.`{prefix}`.`public__bench`"
    lake_rows = spark.table(table.replace("`", "")).count()

    # the physical limit in the same session: a plain Iceberg append of as many rows of the same shape
    append_table = f"lake.`{prefix}`.`append_limit`"
    spark.sql(
        f"CREATE TABLE {append_table} (id bigint, name string, price decimal(12,2), created timestamp_ntz, active boolean, "
        "_walflow_op string, _walflow_lsn bigint, _walflow_source_ts_ms bigint, _walflow_applied_at timestamp) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.merge.mode'='merge-on-read')"
    )
    rows = spark.range(args.changes).selectExpr(
        "id", "concat('name-', id) AS name", "CAST((id % 100000) / 100.0 AS decimal(12,2)) AS price",
        "CAST(timestamp_seconds(1704067200 + id) AS timestamp_ntz) AS created", "id % 2 = 0 AS active",
        "'u' AS _walflow_op", "id AS _walflow_lsn", "id AS _walflow_source_ts_ms", "current_timestamp() AS _walflow_applied_at",
    ).cache()
    rows.count()  # materialise first: the append alone is timed
    start = time.perf_counter()
    rows.writeTo(append_table.replace("`", "")).append()
    append_s = time.perf_counter() - start
    # and the floor of the MERGE itself: the same mix of changes, already in memory, merged into that table
    changes = spark.range(args.changes).selectExpr(
        f"CASE WHEN id % 10 = 9 THEN id + {args.changes} ELSE id END AS id", "concat('name-', id) AS name",
        "CAST((id % 100000) / 100.0 + 1 AS decimal(12,2)) AS price", "CAST(timestamp_seconds(1704067200 + id) AS timestamp_ntz) AS created",
        "id % 2 = 1 AS active", "CASE WHEN id % 10 < 8 THEN 'u' WHEN id % 10 = 8 THEN 'd' ELSE 'c' END AS _walflow_op",
        "id AS _walflow_lsn", "id AS _walflow_source_ts_ms",
    ).cache()
    changes.count()
    changes.createOrReplaceTempView("bench_changes")
    columns = ["id", "name", "price", "created", "active", "_walflow_op", "_walflow_lsn", "_walflow_source_ts_ms"]
    start = time.perf_counter()
    spark.sql(
        f"MERGE INTO {append_table} t USING bench_changes s ON t.id <=> s.id WHEN MATCHED AND s._walflow_op = 'd' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET " + ", ".join(f"t.{c} = s.{c}" for c in columns) + ", t._walflow_applied_at = current_timestamp() "
        f"WHEN NOT MATCHED AND s._walflow_op <> 'd' THEN INSERT ({', '.join(columns)}, _walflow_applied_at) "
        f"VALUES ({', '.join('s.' + c for c in columns)}, current_timestamp())"
    )
    merge_s = time.perf_counter() - start
    print("BENCH_APPLY " + json.dumps({"load_s": load_s, "apply_s": apply_s, "append_s": append_s, "merge_s": merge_s, "lake_rows": lake_rows, "ops": applied.get("ops"), "load_timings": load.get("timings"), "apply_timings": applied.get("timings")}))
    spark.stop()


if __name__ == "__main__":
    main()
