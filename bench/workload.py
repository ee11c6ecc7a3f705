"""The benchmarks' table and rows, one definition for all of them so that their figures describe the same rows."""

from __future__ import annotations

import os
import time
from typing import Any

from confluent_kafka.admin import AdminClient

#: The benchmarks' table: a key and the common types (text, numeric, timestamp, boolean).
TABLE = """
CREATE TABLE bench (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    price numeric(12, 2),
    created timestamp NOT NULL,
    active boolean
)
"""

#: Rows ``%s`` to ``%s`` (ids, inclusive) of the benchmarks' table, in one statement (one transaction when streamed).
ROWS_SQL = (
    "INSERT INTO bench SELECT g, 'name-' || g, (g %% 100000) / 100.0, timestamp '2024-01-01' + g * interval '1 "
    "second', g %% 2 = 0 FROM generate_series(%s::bigint, %s::bigint) g"
)


def incremental_snapshot(config: Any, dsn: str, producer: Any) -> tuple[int, float]:
    """Signal an incremental snapshot of the benchmarks' table through the connector's signal table and run stream
    batches until one finds nothing left; return the rows emitted and the seconds from the signal on."""
    import psycopg

    from walflow.capture.stream import StreamBatch

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO walflow_signal VALUES ('bench', 'execute-snapshot', '{\"data-collections\": "
            '["public.bench"]}\')'
        )
    start = time.perf_counter()
    rows = 0
    while True:
        summary = StreamBatch(config, dsn, producer).run()
        rows += summary.snapshot_rows
        if summary.snapshot_rows == 0 and summary.signals == 0:
            return rows, time.perf_counter() - start


def drop_topics(prefix: str) -> int:
    """Delete the topics a benchmark phase wrote (names starting with ``prefix`` and a dot); return how many.

    The embedded broker keeps topics in memory and produces more slowly the more it holds (1M-row incremental
    snapshots measured 165-170k rows/s on a fresh broker and 104k on one that several GB of earlier runs had
    filled), which a Kafka cluster writing segments to disk does not: each phase deletes what it wrote once it
    is measured, so that a figure does not depend on the phases or runs before it.
    """
    admin = AdminClient({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]})
    names = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix + ".")]
    if names:
        for future in admin.delete_topics(names, operation_timeout=60).values():
            future.result()
    return len(names)
