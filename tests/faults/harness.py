"""Shared parts of the fault scenarios: a concurrent writer, the apply job, and the checks.

A scenario passes when (a) replaying the topic gives the source table, (b) the lake equals the source, and
(c) every duplicate record repeats an earlier record exactly (the at-least-once window: a batch killed after
Kafka acknowledged it but before the slot advanced is sent again).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import psycopg

from tests.support import apply_lake, lake_rows, read_topic, replay

ROOT = Path(__file__).resolve().parents[2]
RESULTS: list[dict[str, Any]] = []
ITERATIONS = int(os.environ.get("WALFLOW_FAULT_ITERATIONS", "2"))
TABLE = "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)"


class Writer(threading.Thread):
    """Random inserts, updates and deletes in small transactions until stopped; survives server restarts.

    ``written`` counts the changes of transactions whose COMMIT returned; ``uncertain`` those whose COMMIT was
    cut off by a restart (committed or not: the source table is the truth for the checks).
    """

    def __init__(self, dsn: str, seed: int, first_id: int = 1_000_000, pause: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        #: seconds between two transactions
        self.pause = pause
        self.rng = random.Random(seed)
        self.next_id = first_id
        self.stop_event = threading.Event()
        self.written = 0
        self.uncertain = 0

    def run(self) -> None:
        conn = None
        while not self.stop_event.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=5)
                changes = 0
                with conn.cursor() as cur:
                    for _ in range(self.rng.randint(1, 4)):
                        op = self.rng.random()
                        if op < 0.5:
                            cur.execute(
                                "INSERT INTO t VALUES (%s, %s, %s)", (self.next_id, self.rng.randint(0, 999), "w")
                            )
                            self.next_id += 1
                        elif op < 0.85:
                            cur.execute(
                                "UPDATE t SET v = v + 1, note = 'u' WHERE id = (SELECT id FROM t ORDER BY random()"
                                " LIMIT 1)"
                            )
                        else:
                            cur.execute("DELETE FROM t WHERE id = (SELECT id FROM t ORDER BY random() LIMIT 1)")
                        changes += cur.rowcount
                try:
                    conn.commit()
                    self.written += changes
                except psycopg.OperationalError:
                    self.uncertain += changes
                    raise
                time.sleep(self.pause)
            except psycopg.OperationalError:
                conn = None
                time.sleep(0.3)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)


def seed_table(dsn: str, rows: int = 1000) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute("INSERT INTO t SELECT g, g %% 1000, 'seed' FROM generate_series(1, %s) g", (rows,))


def source_rows(dsn: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: {"id": r[0], "v": r[1], "note": r[2]} for r in conn.execute("SELECT id, v, note FROM t")}


def check_topic(records: list[Any], dsn: str) -> tuple[int, int]:
    """(changes found, duplicates); asserts the replay equals the source and duplicates are exact repeats."""
    seen: dict[tuple[Any, ...], Any] = {}
    duplicates = 0
    found = 0
    for rec in records:
        if rec.value is None:
            continue
        p = rec.payload
        ident = (
            p["source"].get("lsn"),
            orjson.dumps(rec.key_payload, option=orjson.OPT_SORT_KEYS),
            p["op"],
            p["source"].get("txId"),
        )
        if p["op"] == "r":
            ident += (orjson.dumps(p["after"], option=orjson.OPT_SORT_KEYS),)
        # Two fields may differ on a redelivery, as with Debezium: the envelope's ts_ms (when the event was
        # processed) and the first element of source.sequence (the last commit LSN known when the batch began,
        # which is older after a server crash rolled the slot back; a consumer ordering by sequence still sees
        # the redelivery as not newer than the first delivery).
        content = {k: v for k, v in p.items() if k not in ("ts_ms", "ts_us", "ts_ns")}
        sequence = orjson.loads(p["source"]["sequence"]) if p["source"].get("sequence") else None
        content["source"] = {**p["source"], "sequence": sequence[1] if sequence else None}
        if ident in seen:
            duplicates += 1
            if p["op"] != "r" and seen[ident] != content:
                first = seen[ident]
                diff = {
                    k: (first.get(k), content.get(k))
                    for k in set(first) | set(content)
                    if first.get(k) != content.get(k)
                }
                if "source" in diff:
                    a, b = diff.pop("source")
                    diff.update({f"source.{k}": (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)})
                raise AssertionError(f"a duplicate differs from its first delivery: {ident}: {diff}")
            continue
        seen[ident] = content
        if p["op"] in ("c", "u", "d"):
            found += 1
    state = {v["id"]: {"id": v["id"], "v": v["v"], "note": v["note"]} for v in replay(records).values()}
    source = source_rows(dsn)
    missing = set(source) - set(state)
    extra = set(state) - set(source)
    wrong = [k for k in source if k in state and state[k] != source[k]]
    assert not (missing or extra or wrong), (
        f"topic replay differs from the source: {len(missing)} missing, {len(extra)} extra, {len(wrong)} wrong"
    )
    return found, duplicates


def check_lake(spark: Any, config: Any, dsn: str, warehouse: str) -> None:
    """Apply what is left with the lake job (in the tests' Spark session) and compare the lake with the source."""
    from walflow.lake import table_name

    namespace = config.walflow_lake_namespace or config.topic_prefix
    apply_lake(spark, config, warehouse)
    lake = {
        r["id"]: {"id": r["id"], "v": r["v"], "note": r["note"]}
        for r in lake_rows(namespace, table_name("public", "t"), warehouse)
    }
    source = source_rows(dsn)
    assert lake == source, (
        f"lake differs from the source: {len(set(source) ^ set(lake))} keys differ,"
        f" {sum(1 for k in source if lake.get(k) != source[k])} rows differ"
    )


def record(scenario: str, iterations: int, written: int, found: int, duplicates: int, result: str = "pass") -> None:
    # a change whose COMMIT was cut off by a restart may have committed: found can exceed written, never trail it
    assert found >= written, f"{scenario}: {written} changes committed but only {found} reached Kafka"
    RESULTS.append(
        {
            "scenario": scenario,
            "iterations": iterations,
            "written": written,
            "found": found,
            "duplicates": duplicates,
            "result": result,
        }
    )


@contextmanager
def scenario(name: str, iterations: int) -> Iterator[None]:
    """Record a failing scenario in the table too (a passing one records itself with its figures)."""
    try:
        yield
    except BaseException as exc:
        RESULTS.append(
            {
                "scenario": name,
                "iterations": iterations,
                "written": "-",
                "found": "-",
                "duplicates": "-",
                "result": f"FAIL ({type(exc).__name__})",
            }
        )
        raise


def all_records(config: Any) -> list[Any]:
    return read_topic(f"{config.topic_prefix}.public.t")
