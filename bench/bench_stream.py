"""Streaming benchmark: N committed row changes from the slot to the broker, against PostgreSQL's own decoding.

Prints one JSON line. In the same run it measures the physical limit on this machine: PostgreSQL decoding the
same changes through the same peek function, discarding them (``SELECT count(*) FROM pg_logical_slot_peek_...``).
A second phase streams one single transaction of ``--big-tx`` rows in a child process and reports its peak RSS,
the bounded-memory figure.

    python bench/bench_stream.py [--rows 500000] [--transactions 10] [--big-tx 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from bench.workload import ROWS_SQL, TABLE, drop_topics
from tests.support import create_database, drop_database, pg_dsn
from walflow.capture.stream import StreamBatch
from walflow.config.connector import parse_config
from walflow.kafka import EventProducer, producer_settings
from walflow.source.connection import connect
from walflow.source.prepare import setup_source


def fill(dsn: str, rows: int, transactions: int, offset: int = 0) -> None:
    per_tx = rows // transactions
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in range(transactions):
            lo = offset + t * per_tx
            conn.execute(ROWS_SQL, (lo, lo + per_tx - 1))


def peek_rate(dsn: str, slot: str, publication: str) -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
            "'publication_names', %s, 'messages', 'true')",
            (slot, publication),
        ).fetchone()
        return count, time.perf_counter() - start


def config_for(name: str, schemas: bool = True):
    return parse_config(
        {
            "name": name,
            "topic.prefix": name,
            "slot.name": name,
            "publication.name": name,
            "walflow.batch.max.events": 10_000_000,
            "walflow.batch.max.seconds": 3600,
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
        }
    )


def child_big_tx(dsn: str, name: str) -> None:
    """Run in a child process: stream everything, print peak RSS in MB."""
    config = config_for(name)
    producer = EventProducer(producer_settings({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}))
    summary = StreamBatch(config, dsn, producer).run()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"events": summary.events, "peak_rss_mb": round(peak_kb / 1024, 1), "seconds": summary.seconds}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--transactions", type=int, default=10)
    parser.add_argument(
        "--big-tx", type=int, default=1_000_000, help="rows of the single-transaction memory phase (0 to skip)"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_big_tx(*args.child)
        return

    db = create_database("bench_stream")
    dsn = pg_dsn(db)
    name = f"bench_{db.split('_')[-1]}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
        config = config_for(name)
        with connect(dsn) as conn:
            setup_source(conn, config)
        fill(dsn, args.rows, args.transactions)
        changes, decode_s = peek_rate(dsn, config.slot_name, config.publication_name)
        pg_rate = args.rows / decode_s

        producer = EventProducer(producer_settings({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]}))
        start = time.perf_counter()
        summary = StreamBatch(config, dsn, producer).run()
        elapsed = time.perf_counter() - start
        assert summary.events == args.rows, summary
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        drop_topics(config.topic_prefix)

        result = {
            "bench": "stream",
            "events": summary.events,
            "transactions": summary.transactions,
            "schemas_enabled": True,
            "seconds": round(elapsed, 2),
            "events_per_s": round(summary.events / elapsed),
            "mb_per_s": round(summary.bytes / 1e6 / elapsed, 1),
            "bytes_per_event": round(summary.bytes / summary.events),
            "peak_rss_mb": round(rss_mb, 1),
            "pg_decode_events_per_s": round(pg_rate),
            "pg_decode_messages": changes,
            "ratio_to_pg_decode": round((summary.events / elapsed) / pg_rate, 3),
        }
        if args.big_tx:
            fill(dsn, args.big_tx, 1, offset=10_000_000)
            out = (
                subprocess.run(
                    [sys.executable, __file__, "--child", dsn, name], check=True, capture_output=True, text=True
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            big = json.loads(out)
            assert big["events"] == args.big_tx, big
            result["big_tx_rows"] = args.big_tx
            result["big_tx_peak_rss_mb"] = big["peak_rss_mb"]
            result["big_tx_events_per_s"] = round(big["events"] / big["seconds"])
            drop_topics(config.topic_prefix)
        print(json.dumps(result))
    finally:
        drop_database(db)


if __name__ == "__main__":
    main()
