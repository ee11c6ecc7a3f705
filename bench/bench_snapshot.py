"""Snapshot benchmark: an initial and an incremental snapshot of one table, against COPY of the same table.

Prints one JSON line. The physical limit is measured in the same run: ``COPY (SELECT ...) TO STDOUT`` of the
same rows read by psycopg and discarded.

    python bench/bench_snapshot.py [--rows 2000000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from bench.workload import ROWS_SQL, TABLE, drop_topics, incremental_snapshot
from tests.support import create_database, drop_database, pg_dsn
from walflow.capture.setup import ConnectorSetup
from walflow.config.connector import parse_config
from walflow.kafka import EventProducer, producer_settings


def producer() -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    db = create_database("bench_snapshot")
    dsn = pg_dsn(db)
    name = f"bsnap_{uuid.uuid4().hex[:6]}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
            conn.execute(ROWS_SQL, (1, args.rows))
            conn.execute("VACUUM ANALYZE bench")
            start = time.perf_counter()
            copied = 0
            with conn.cursor().copy("COPY (SELECT * FROM bench ORDER BY id) TO STDOUT") as copy:
                for block in copy:
                    copied += len(block)
            copy_s = time.perf_counter() - start

        config = parse_config(
            {
                "name": name,
                "topic.prefix": name,
                "slot.name": name,
                "publication.name": name,
                "snapshot.max.threads": args.threads,
                "signal.data.collection": "public.walflow_signal",
                "walflow.batch.max.events": 10_000_000,
                "walflow.batch.max.seconds": 3600,
            }
        )
        prod = producer()
        start = time.perf_counter()
        report = ConnectorSetup(config, dsn, lambda: prod).run()
        initial_s = time.perf_counter() - start
        assert report["snapshot"]["rows"] == args.rows, report["snapshot"]
        initial_bytes = prod.bytes
        drop_topics(config.topic_prefix)

        prod = producer()
        rows, incremental_s = incremental_snapshot(config, dsn, prod)
        assert rows == args.rows, rows
        drop_topics(config.topic_prefix)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        copy_rate = args.rows / copy_s
        print(
            json.dumps(
                {
                    "bench": "snapshot",
                    "rows": args.rows,
                    "snapshot_max_threads": args.threads,
                    "copy_rows_per_s": round(copy_rate),
                    "copy_mb_per_s": round(copied / 1e6 / copy_s, 1),
                    "initial_seconds": round(initial_s, 2),
                    "initial_rows_per_s": round(args.rows / initial_s),
                    "initial_mb_per_s": round(initial_bytes / 1e6 / initial_s, 1),
                    "initial_ratio_to_copy": round(args.rows / initial_s / copy_rate, 3),
                    "incremental_seconds": round(incremental_s, 2),
                    "incremental_rows_per_s": round(args.rows / incremental_s),
                    "incremental_mb_per_s": round(prod.bytes / 1e6 / incremental_s, 1),
                    "incremental_ratio_to_copy": round(args.rows / incremental_s / copy_rate, 3),
                    "peak_rss_mb": round(rss_mb, 1),
                }
            )
        )
    finally:
        drop_database(db)


if __name__ == "__main__":
    main()
