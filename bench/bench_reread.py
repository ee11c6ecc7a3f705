"""Re-read benchmark: a rewrite of a large table converging in the lake, against a full initial snapshot of it.

``ALTER TABLE bench ALTER COLUMN price TYPE numeric(14, 2) USING price * 2`` rewrites every row and no event carries it
(issue 45): the next stream batch finds the rewrite in the catalog, re-reads the table (an incremental snapshot) and,
once the lake applied the re-read, the lake sweeps what it held from before. Measured: the stream batches of the
re-read and the lake's applies until the lake equals the source again, against the way without it, a full initial
snapshot of the table (a connector of its own: setup, then the lake's first apply). A second table of the same
connector is not re-read: its lake table has no new commit. The physical limit, measured in the same run: ``COPY`` of
the same rows.

Prints one JSON line.

    python bench/bench_reread.py [--rows 1000000] [--other-rows 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from bench.workload import ROWS_SQL, TABLE, drop_topics
from tests.support import create_database, drop_database, pg_dsn, start_spark
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.connector import parse_config
from walflow.kafka import EventProducer, producer_settings
from walflow.lake.apply import LakeJob
from walflow.lake.settings import LakeSettings


def producer() -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}))


def connector(name: str, tables: str) -> Any:
    return parse_config(
        {
            "name": name,
            "topic.prefix": name,
            "slot.name": name,
            "publication.name": name,
            "table.include.list": tables,
            "walflow.batch.max.events": 10_000_000,
            "walflow.batch.max.seconds": 3600,
        }
    )


def apply_all(spark: Any, config: Any) -> float:
    """Apply the connector's topics until nothing waits; the seconds it took."""
    start = time.perf_counter()
    while True:
        results = LakeJob(
            spark, LakeSettings.from_config(config), {"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}
        ).run()
        if not any(r.get("backlog") for r in results):
            return time.perf_counter() - start


def lake_figures(spark: Any, config: Any, table: str) -> tuple[int, Decimal, int]:
    """Rows, the sum of ``price`` and the current snapshot of a lake table."""
    ident = LakeSettings.from_config(config).ident(f"public__{table}")
    row = spark.sql(f"SELECT count(*) AS n, sum(price) AS s FROM {ident}").collect()[0]
    snapshot = spark.sql(f"SELECT snapshot_id FROM {ident}.refs WHERE name = 'main'").collect()[0][0]
    return int(row["n"]), Decimal(row["s"]), int(snapshot)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--other-rows", type=int, default=100_000)
    args = parser.parse_args()
    db = create_database("bench_reread")
    dsn = pg_dsn(db)
    tag = uuid.uuid4().hex[:6]
    spark = start_spark()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
            conn.execute(ROWS_SQL, (1, args.rows))
            conn.execute("CREATE TABLE other (LIKE bench INCLUDING ALL)")
            conn.execute("INSERT INTO other SELECT * FROM bench WHERE id <= %s", (args.other_rows,))
            conn.execute("VACUUM ANALYZE bench")
            start = time.perf_counter()
            with conn.cursor().copy("COPY (SELECT * FROM bench ORDER BY id) TO STDOUT") as copy:
                for _block in copy:
                    pass
            copy_s = time.perf_counter() - start

        # the connector under test: both tables, snapshotted and applied before the rewrite
        config = connector(f"brr_{tag}", r"public\.bench,public\.other")
        ConnectorSetup(config, dsn, producer).run()
        apply_all(spark, config)
        other_before = lake_figures(spark, config, "other")

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE bench ALTER COLUMN price TYPE numeric(14, 2) USING price * 2")
            expected = conn.execute("SELECT count(*), sum(price) FROM bench").fetchone()
        reread: list[str] = []
        start = time.perf_counter()
        while True:
            summary = StreamBatch(config, dsn, producer()).run()
            reread += [r["table"] for r in summary.rereads]
            if not summary.rereads and not summary.snapshot_rows and not summary.events:
                break
        stream_s = time.perf_counter() - start
        apply_s = apply_all(spark, config)
        rows, total, _snapshot = lake_figures(spark, config, "bench")
        assert (rows, total) == (expected[0], expected[1]), ((rows, total), expected)
        assert reread == ["public.bench"], reread
        assert lake_figures(spark, config, "other") == other_before  # not re-read: no commit to its lake table
        drop_topics(config.topic_prefix)

        # the way without the re-read: a full initial snapshot of the table into a lake of its own
        base = connector(f"brb_{tag}", r"public\.bench")
        start = time.perf_counter()
        ConnectorSetup(base, dsn, producer).run()
        snapshot_s = time.perf_counter() - start
        base_apply_s = apply_all(spark, base)
        assert lake_figures(spark, base, "bench")[:2] == (expected[0], expected[1])
        drop_topics(base.topic_prefix)

        converge_s = stream_s + apply_s
        full_s = snapshot_s + base_apply_s
        print(
            json.dumps(
                {
                    "bench": "reread",
                    "rows": args.rows,
                    "other_rows": args.other_rows,
                    "rewrite": "ALTER COLUMN price TYPE numeric(14, 2) USING price * 2",
                    "reread_stream_seconds": round(stream_s, 2),
                    "reread_apply_seconds": round(apply_s, 2),
                    "reread_converge_seconds": round(converge_s, 2),
                    "full_snapshot_seconds": round(snapshot_s, 2),
                    "full_snapshot_apply_seconds": round(base_apply_s, 2),
                    "full_snapshot_converge_seconds": round(full_s, 2),
                    "converge_ratio_to_full_snapshot": round(converge_s / full_s, 3),
                    "tables_reread": reread,
                    "copy_rows_per_s": round(args.rows / copy_s),
                    "reread_rows_per_s": round(args.rows / stream_s),
                    "reread_ratio_to_copy": round(args.rows / stream_s / (args.rows / copy_s), 3),
                    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                }
            )
        )
    finally:
        spark.stop()
        drop_database(db)


if __name__ == "__main__":
    main()
