"""``make demo``: the inventory database, its connector's DAGs, and the Debezium events they produce.

Safe to run again: the schema is created once, each run adds a new round of changes, and the counts shown
are everything the topics hold.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
from confluent_kafka import Consumer, KafkaError, TopicPartition
from psycopg import sql

#: the schema and its products, shared with docker-compose.yml's walflow-init
SCHEMA = (Path(__file__).resolve().parents[1] / "include" / "docker" / "init" / "inventory.sql").read_text()

FIRST = ["Sally", "George", "Edward", "Anne", "Ravi", "Mei", "Jonas", "Ines"]
LAST = ["Thomas", "Bailey", "Walker", "Kretchmar", "Patel", "Chen", "Berg", "Silva"]


def dsn(dbname: str) -> str:
    base = os.environ["WALFLOW_PG_DSN"]
    return " ".join([*(p for p in base.split() if not p.startswith("dbname=")), f"dbname={dbname}"])


def ensure_database() -> None:
    with psycopg.connect(dsn("postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = 'inventory'").fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE inventory"))
            print("created database inventory")
    with psycopg.connect(dsn("inventory"), autocommit=True) as conn:
        conn.execute(SCHEMA)
    apply_roles()


def apply_roles() -> None:
    """Run walflow/source/sql/roles.sql as an administrator would: the connector logs in as the least-privilege role
    ``walflow`` (the Connection ``postgres_default``), its signals' conditions are evaluated as ``walflow_reader``
    (``postgres_reader``), and the script creates the publication, so the connector owns none of the tables
    (``publication.autocreate.mode: disabled``). The passwords are the runtime's generated ones (secrets.json)."""
    from sandbox.embedded import CONNECTOR_ROLE, READER_ROLE, run_roles_sql, runtime_secrets

    passwords = runtime_secrets()
    result = run_roles_sql(dsn("inventory"), {
        "role": CONNECTOR_ROLE, "password": passwords[CONNECTOR_ROLE],
        "reader": READER_ROLE, "reader_password": passwords[READER_ROLE],
        "schema": "public", "tables": "public.customers,public.products,public.orders",
        "publication": "walflow_inventory",
        "signal_table": "public.walflow_signal",
    })  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"walflow/source/sql/roles.sql failed: {result.stderr.strip()}")
    # a demo database an earlier walflow set up as the superuser: its state and signal tables become the role's
    with psycopg.connect(dsn("inventory"), autocommit=True) as conn:
        for (statement,) in conn.execute(
            "SELECT format('ALTER TABLE %%s OWNER TO %%I', c.oid::regclass, %s::text) FROM pg_class c "
            "WHERE c.oid IN (to_regclass('public.walflow_state'), to_regclass('public.walflow_signal')) AND "
            "pg_get_userbyid(c.relowner) <> %s",
            (CONNECTOR_ROLE, CONNECTOR_ROLE),
        ).fetchall():
            conn.execute(statement)


def make_changes(rng: random.Random) -> None:
    """A round of inserts, updates and deletes across the three tables, in a few transactions."""
    tag = uuid.uuid4().hex[:6]
    # autocommit, so that each transaction() block below is a transaction of its own
    with psycopg.connect(dsn("inventory"), autocommit=True) as conn:
        with conn.transaction():
            for i in range(8):
                conn.execute(
                    "INSERT INTO customers (first_name, last_name, email) VALUES (%s, %s, %s)",
                    (FIRST[i], LAST[i], f"{FIRST[i].lower()}.{tag}{i}@example.com"),
                )
        customers = [r[0] for r in conn.execute("SELECT id FROM customers ORDER BY id DESC LIMIT 8")]
        products = [r[0] for r in conn.execute("SELECT id FROM products")]
        with conn.transaction():
            for _ in range(12):
                conn.execute(
                    "INSERT INTO orders (order_date, purchaser, quantity, product_id) VALUES (current_date, %s, %s, "
                    "%s)",
                    (rng.choice(customers), rng.randint(1, 5), rng.choice(products)),
                )
        with conn.transaction():
            conn.execute("UPDATE products SET price = price * 1.10 WHERE name = 'hammer'")
            conn.execute(
                "UPDATE customers SET email = 'sally.' || id || '@acme.example' WHERE id = %s", (customers[-1],)
            )
            conn.execute(
                "UPDATE orders SET quantity = quantity + 1, updated_at = now() WHERE id IN (SELECT id FROM orders "
                "ORDER BY id DESC LIMIT 3)"
            )
        with conn.transaction():
            conn.execute("DELETE FROM orders WHERE id IN (SELECT id FROM orders ORDER BY id DESC LIMIT 2)")
    print("made a round of changes: 8 customer inserts, 12 order inserts, 5 updates, 2 deletes")


def airflow_dag_test(dag_id: str) -> None:
    print(f"$ airflow dags test {dag_id}")
    result = subprocess.run(["airflow", "dags", "test", dag_id], capture_output=True, text=True)
    if result.returncode != 0:
        sys.stdout.write(result.stdout[-4000:])
        sys.stderr.write(result.stderr[-4000:])
        raise SystemExit(f"DAG {dag_id} failed (exit {result.returncode})")
    for line in (result.stdout + result.stderr).splitlines():
        if "walflow" in line and ("connector inventory" in line or "created" in line):
            print("   ", line.split("} ")[-1][:220])


def read_all(topics: list[str]) -> dict[str, list]:
    consumer = Consumer(
        {
            "bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"],
            "group.id": f"walflow-demo-{uuid.uuid4().hex[:6]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    out: dict[str, list] = {}
    try:
        metadata = consumer.list_topics(timeout=10)
        for topic in topics:
            if topic not in metadata.topics:
                out[topic] = []
                continue
            parts = sorted(metadata.topics[topic].partitions)
            consumer.assign([TopicPartition(topic, p, 0) for p in parts])
            eof: set[int] = set()
            records = []
            while len(eof) < len(parts):
                msg = consumer.poll(10)
                if msg is None:
                    break
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(msg.partition())
                        continue
                    raise SystemExit(msg.error().str())
                records.append(msg)
            out[topic] = records
    finally:
        consumer.close()
    return out


def broker_lost_topics() -> bool:
    """True when a demo topic is missing or ends below the offsets the lake already applied from it."""
    from walflow.lake import OFFSETS_PROPERTY, parse_offsets, partition_end, read_hadoop_table

    consumer = Consumer(
        {
            "bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"],
            "group.id": "walflow-demo-check",
            "enable.partition.eof": True,
        }
    )
    try:
        topics = consumer.list_topics(timeout=10).topics
        for table in ("customers", "products", "orders"):
            topic = f"inventory.public.{table}"
            if topic not in topics:
                return True
            lake = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], "inventory", f"public__{table}")
            applied: dict[int, int] = {}
            for snapshot in reversed(lake.snapshots() if lake is not None else []):
                text = snapshot.summary.additional_properties.get(OFFSETS_PROPERTY) if snapshot.summary else None
                if text:
                    applied = parse_offsets(text).get(topic, {})
                    break
            for partition, offset in applied.items():
                if partition_end(consumer, topic, partition, 0) < offset:
                    return True
    finally:
        consumer.close()
    return False


def start_over_if_broker_lost() -> None:
    """Start the demo afresh when the broker no longer holds what earlier runs produced.

    The embedded broker keeps topics in memory, so a ``make down``/``make up`` loses them while the database,
    its slot and the lake survive: the slot would only resend new changes and the lake job would rightly refuse
    topics that end below the offsets it already applied. A production broker keeps its topics; this only
    concerns the demo's own objects.
    """
    import shutil

    with psycopg.connect(dsn("postgres"), autocommit=True) as conn:
        slot = conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'walflow_inventory'"
        ).fetchone()
        if slot is None:
            return
        if not broker_lost_topics():
            return
        print(
            "the embedded broker restarted and lost the demo's topics (it keeps them in memory): starting the demo over"
        )
        conn.execute("SELECT pg_drop_replication_slot('walflow_inventory')")
        conn.execute("DROP DATABASE IF EXISTS inventory WITH (FORCE)")
    shutil.rmtree(Path(os.environ["WALFLOW_WAREHOUSE"]) / "inventory", ignore_errors=True)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]})
    stale = [t for t in admin.list_topics(timeout=10).topics if t.startswith("inventory.") or t == "inventory"]
    for future in admin.delete_topics(stale, operation_timeout=30).values() if stale else []:
        future.result()


TOPICS = ["inventory.public.customers", "inventory.public.products", "inventory.public.orders", "inventory.transaction"]


def _label(message: Any) -> str:
    value = orjson.loads(message.value()) if message.value() is not None else None
    payload = value["payload"] if value else None
    return "tombstone" if payload is None else payload.get("op") or payload.get("status")


def main() -> None:
    start_over_if_broker_lost()
    ensure_database()
    airflow_dag_test("inventory__setup")
    held_before = {topic: len(msgs) for topic, msgs in read_all(TOPICS).items()}
    make_changes(random.Random())
    airflow_dag_test("inventory__stream")
    records = read_all(TOPICS)
    print("\nrecords per topic: this stream run (and everything the broker holds):")
    for topic in TOPICS:
        msgs = records[topic]
        new = msgs[held_before.get(topic, 0) :]
        ops: dict[str, int] = {}
        for m in new:
            ops[_label(m)] = ops.get(_label(m), 0) + 1
        detail = ", ".join(f"{k}={v}" for k, v in sorted(ops.items()))
        print(f"  {topic:32s} {len(new):5d} new ({detail})   {len(msgs):6d} held")
    print("\na sample of events (key → value payload):")
    for topic in ("inventory.public.customers", "inventory.public.orders"):
        for m in records[topic][-2:]:
            key = orjson.loads(m.key())["payload"] if m.key() else None
            value = orjson.loads(m.value())["payload"] if m.value() else None
            if value:
                value = {k: value[k] for k in ("op", "before", "after")} | {
                    "source": {k: value["source"][k] for k in ("name", "db", "table", "txId", "lsn", "ts_ms")}
                }
            print(f"  {topic} {orjson.dumps(key).decode()} → {orjson.dumps(value).decode()[:400]}")
    first = records["inventory.public.products"][:1] or records["inventory.public.orders"][:1]
    if first:
        schema = orjson.loads(first[0].value())["schema"]
        print(
            f"\nvalue schema of {first[0].topic()}: {schema['name']} with fields "
            f"{[f['field'] for f in schema['fields']]}"
        )
    from walflow.admin.cli import render
    from walflow.airflow.status import status

    print("\n$ walflow status inventory")
    print(render(status("inventory", dsn=dsn("inventory"))))
    # the monitor DAG judges the connector apart from its stream (it fails, and alerts, when a limit is passed)
    airflow_dag_test("inventory__monitor")
    if not show_lake():
        raise SystemExit("the lake differs from the source: see the table above and the apply_to_lake task's log")


def show_lake() -> bool:
    """Print source and lake row counts side by side (the lake read with pyiceberg, independently of Spark);
    True when they are equal for every table."""
    from walflow.lake import read_hadoop_table

    warehouse = os.environ["WALFLOW_WAREHOUSE"]
    print(f"\nsource vs lake (Iceberg tables under {warehouse}):")
    equal = True
    with psycopg.connect(dsn("inventory")) as conn:
        for table in ("customers", "products", "orders"):
            (source,) = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()  # type: ignore[misc]
            static = read_hadoop_table(warehouse, "inventory", f"public__{table}")
            lake = str(static.scan().to_arrow().num_rows) if static is not None else "-"
            mark = "equal" if lake == str(source) else "DIFFERENT"
            equal = equal and lake == str(source)
            print(f"  inventory.public__{table:10s} source {source:5d}   lake {lake:>5s}   {mark}")
    return equal


if __name__ == "__main__":
    main()
