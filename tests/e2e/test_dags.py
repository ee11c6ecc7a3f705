"""End to end through Airflow: the factory's setup and stream DAGs run with dag.test(), records read from Kafka."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.privileges import as_connector, as_reader, hand_over
from tests.support import airflow_connector, read_topic, run_dag, unique

pytestmark = pytest.mark.timeout(600)


@pytest.fixture()
def connector_dir(
    tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    name = unique("e2e")
    # the lake has its own end-to-end test (test_lake.py): these stream runs skip the Spark task
    settings = (
        "publication.autocreate.mode: filtered",
        "provide.transaction.metadata: true",
        "skipped.operations: none",
        "walflow.lake.enabled: false",
    )
    for key, value in airflow_connector(tmp_path, name, database, kafka_bootstrap, *settings).items():
        monkeypatch.setenv(key, value)
    return {"name": name, "dsn": database}


def test_setup_then_stream(connector_dir: dict[str, str]) -> None:
    name, dsn = connector_dir["name"], connector_dir["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL, qty int)")
        conn.execute("CREATE TABLE nokey (msg text)")
    hand_over(dsn, "orders", "nokey")  # the 'filtered' publication's tables, to the connector role's group
    run_dag(f"{name}__setup")
    run_dag(f"{name}__setup")  # idempotent
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders (item, qty) VALUES ('apple', 1), ('pear', 2)")
        conn.execute("UPDATE orders SET qty = 5 WHERE item = 'apple'")
        conn.execute("DELETE FROM orders WHERE item = 'pear'")
        conn.execute("UPDATE orders SET id = 10 WHERE item = 'apple'")
        conn.execute("INSERT INTO nokey VALUES ('x')")
        conn.execute("ALTER TABLE orders ADD COLUMN note text")
        conn.execute("INSERT INTO orders (item, qty, note) VALUES ('plum', 3, 'ripe')")
        conn.execute("TRUNCATE nokey")
    run_dag(f"{name}__stream")
    orders = read_topic(f"{name}.public.orders")
    assert [r.op for r in orders] == ["c", "c", "u", "d", None, "d", None, "c", "c"]
    assert orders[-1].payload["after"] == {"id": 3, "item": "plum", "qty": 3, "note": "ripe"}
    nokey = read_topic(f"{name}.public.nokey")
    assert [r.op for r in nokey] == ["c", "t"] and nokey[0].key is None
    tx = read_topic(f"{name}.transaction")
    assert [r.payload["status"] for r in tx].count("BEGIN") == len(tx) // 2
    # a second stream run with no changes produces nothing
    run_dag(f"{name}__stream")
    assert len(read_topic(f"{name}.public.orders")) == len(orders)

    # the operator reused directly: its XCom carries the reference's streaming metrics
    from walflow.airflow.operators import WalflowStreamOperator

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders (item, qty) VALUES ('kiwi', 7)")
        conn.execute("UPDATE orders SET qty = 8 WHERE item = 'kiwi'")
    result = WalflowStreamOperator(task_id="stream_once", connector=name).execute({})
    metrics = result["metrics"]
    assert metrics["TotalNumberOfCreateEventsSeen"] == 1 and metrics["TotalNumberOfUpdateEventsSeen"] == 1
    assert (
        metrics["NumberOfCommittedTransactions"] >= 2
        and metrics["SourceEventPosition"]["confirmed"] == result["advanced_to"]
    )
    # every table the connector captures, whether or not this batch saw events of it
    assert metrics["MilliSecondsBehindSource"] >= 0 and metrics["CapturedTables"] == ["public.nokey", "public.orders"]


def test_dag_files_import_cleanly() -> None:
    from airflow.dag_processing.dagbag import DagBag

    dags_folder = Path(__file__).resolve().parents[2] / "dags"
    os.environ.pop("WALFLOW_CONNECTORS_DIR", None)
    bag = DagBag(dag_folder=str(dags_folder))
    assert bag.import_errors == {}
    assert {"inventory__setup", "inventory__stream", "example_customers_cdc"} <= set(bag.dag_ids)
    stream = bag.dags["inventory__stream"]
    assert stream.max_active_runs == 1
    # the downstream example is scheduled on an Asset that the stream DAG's Spark task really produces
    outlets = {a.uri for a in stream.get_task("apply_to_lake").outlets}
    consumer = bag.dags["example_lake_consumer"]
    assert {a.uri for a in consumer.timetable.asset_condition.objects} <= outlets


def test_a_broken_connector_file_never_takes_the_other_connectors_dags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connector file with a typo and one that is not YAML, beside the shipped connector: Airflow's DagBag of the
    DAG folder loads the good connector's five DAGs, and the broken files are one import error, of
    walflow_connector_errors.py (a file without DAGs, so none is marked stale), naming each file, its key and the
    values it may take."""
    import shutil

    from airflow.dag_processing.dagbag import DagBag

    root = Path(__file__).resolve().parents[2]
    shutil.copy(root / "include" / "connectors" / "inventory.yaml", tmp_path / "inventory.yaml")
    (tmp_path / "typo.yaml").write_text("name: typo\ntopic.prefix: typo\nslot.name: typo\nsnapshot.mode: bogus\n")
    (tmp_path / "unclosed.yml").write_text("name: [unclosed\n")
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    bag = DagBag(dag_folder=str(root / "dags"))
    walflow_dags = {d for d in bag.dag_ids if "__" in d}
    assert walflow_dags == {
        "inventory__setup",
        "inventory__stream",
        "inventory__maintain",
        "inventory__snapshot",
        "inventory__monitor",
    }, bag.dag_ids
    assert [Path(f).name for f in bag.import_errors] == ["walflow_connector_errors.py"], bag.import_errors
    (message,) = bag.import_errors.values()
    assert "2 connector file(s) left out" in message
    assert (
        f"{tmp_path / 'typo.yaml'}: " in message and "'snapshot.mode' = 'bogus'" in message and "'initial'" in message
    )
    assert f"{tmp_path / 'unclosed.yml'}: " in message and "not valid YAML" in message
    # fixed, the error is gone and the connector's DAGs appear
    (tmp_path / "typo.yaml").write_text("name: typo\ntopic.prefix: typo\nslot.name: typo\nsnapshot.mode: initial\n")
    (tmp_path / "unclosed.yml").unlink()
    bag = DagBag(dag_folder=str(root / "dags"))
    assert bag.import_errors == {} and {"typo__setup", "typo__stream"} <= set(bag.dag_ids)


def test_a_debezium_connector_as_kafka_connect_takes_it_loads_and_its_dags_appear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Debezium 3.6 connector's JSON, as Kafka Connect's REST API takes it, with the keys real configurations set
    (connector.class, tasks.max, plugin.name, the JSON converters, an escaped comma in a list, Java's \\Q...\\E in a
    router, the queue and batch sizes, the failure handling modes, schema changes in incremental snapshots, the outbox
    router's JSON payload expansion): the file is loaded as it is (the lake, which needs the events untransformed, is
    off by default beside transforms), and its DAGs appear."""
    import json

    from airflow.dag_processing.dagbag import DagBag

    root = Path(__file__).resolve().parents[2]
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "topic.prefix": "shop",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "table.include.list": "public\\.orders,public\\.t\\d{1\\,3},public\\.outbox",
        "max.queue.size": "8192",
        "max.batch.size": "2048",
        "max.queue.size.in.bytes": "0",
        "poll.interval.ms": "500",
        "custom.metric.tags": "env=prod",
        "replica.identity.autoset.values": "public\\.orders:FULL",
        "slot.drop.on.stop": "false",
        "signal.data.collection": "public.debezium_signal",
        "event.processing.failure.handling.mode": "warn",
        "event.converting.failure.handling.mode": "warn",
        "incremental.snapshot.allow.schema.changes": "true",
        "transforms": "route,outbox",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "\\Qshop.public.\\E(orders)",
        "transforms.route.replacement": "orders-$1",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
        "transforms.outbox.table.expand.json.payload": "true",
        "transforms.outbox.predicate": "isOutbox",
        "predicates": "isOutbox",
        "predicates.isOutbox.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isOutbox.pattern": "\\Qshop.public.outbox\\E",
    }
    (tmp_path / "shop.json").write_text(json.dumps({"name": "shop", "config": config}, indent=2))
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    bag = DagBag(dag_folder=str(root / "dags"))
    assert bag.import_errors == {}, bag.import_errors
    # no lake (it would need the events untransformed), so no lake maintenance
    assert {d for d in bag.dag_ids if d.startswith("shop__")} == {
        "shop__setup",
        "shop__stream",
        "shop__snapshot",
        "shop__monitor",
    }, bag.dag_ids


def test_the_spark_tasks_find_the_iceberg_runtime_where_they_run() -> None:
    """The Iceberg jar is looked up when the task runs, not when the DAG file is parsed (the DAG processor's
    environment need not be the worker's), and not at all when spark.jars.packages brings Iceberg."""
    from walflow.airflow.lake import apply_task, iceberg_runtime_jar, maintain_task
    from walflow.config.connector import parse_config

    jar = iceberg_runtime_jar()
    assert jar is not None, "the pinned Iceberg runtime wheel is a test requirement"
    plain = parse_config({"name": "jars", "topic.prefix": "jars"})
    for task in (apply_task(plain), maintain_task(plain)):
        assert task.jars is None
        task._add_iceberg_runtime()
        task._add_iceberg_runtime()  # a retry of the same task object does not add it twice
        assert task.jars == jar
    own = apply_task(plain)
    own.jars = "/opt/extra.jar"
    own._add_iceberg_runtime()
    assert own.jars == f"/opt/extra.jar,{jar}"
    packages = parse_config(
        {
            "name": "jars",
            "topic.prefix": "jars",
            "walflow.lake.spark.conf": {"spark.jars.packages": "org.apache.iceberg:x:1"},
        }
    )
    task = apply_task(packages)
    task._add_iceberg_runtime()
    assert task.jars is None


@pytest.fixture()
def signal_connector(connector_dir: dict[str, str], tmp_path: Path) -> dict[str, str]:
    path = next(tmp_path.glob("*.yaml"))
    path.write_text(
        path.read_text()
        + (
            "\nsignal.data.collection: public.walflow_signal\nwalflow.snapshot.poke.seconds: 1"
            "\nincremental.snapshot.chunk.size: 50\n"
        )
    )
    return connector_dir


def _stream_in_background(name: str, dsn: str, stop: threading.Event) -> threading.Thread:
    from tests.support import producer
    from walflow.capture.stream import StreamBatch
    from walflow.config.files import resolve

    def loop() -> None:
        config = resolve(name)
        while not stop.is_set():
            StreamBatch(config, as_connector(dsn), producer(), reader_conninfo=as_reader(dsn)).run()
            stop.wait(0.5)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _signals(dsn: str) -> list[dict[str, object]]:
    import json

    with psycopg.connect(dsn) as conn:
        return [
            json.loads(data)
            for (data,) in conn.execute("SELECT data FROM walflow_signal WHERE type = 'execute-snapshot'").fetchall()
        ]


def _snapshot_rows(name: str) -> list:
    return [r for r in read_topic(f"{name}.public.items") if r.op == "r"]


def test_snapshot_dag_with_params_and_backfill_condition(signal_connector: dict[str, str]) -> None:
    from datetime import datetime, timezone

    from walflow.airflow.dag_factory import build_connector_dags

    name, dsn = signal_connector["name"], signal_connector["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text UNIQUE NOT NULL, updated_at timestamp NOT NULL)")
        conn.execute(
            "INSERT INTO items SELECT g, 'v' || g, timestamp '2024-03-01' + (g % 5) * interval '1 day' FROM"
            " generate_series(1, 400) g"
        )
    hand_over(dsn, "items")
    run_dag(f"{name}__setup")
    stop = threading.Event()
    thread = _stream_in_background(name, dsn, stop)
    try:
        dag = build_connector_dags()[f"{name}__snapshot"]
        run = dag.test(run_conf={"data_collections": ["public.items"], "surrogate_key": "v"})
        assert run.state == "success"
        assert len(_snapshot_rows(name)) == 800  # 400 from setup + 400 ad hoc
        assert _signals(dsn)[-1] == {"data-collections": ["public.items"], "type": "incremental", "surrogate-key": "v"}
        # templates inside the condition are rendered with the run's dates
        run = dag.test(
            logical_date=datetime(2024, 3, 2, tzinfo=timezone.utc),
            run_conf={
                "data_collections": ["public.items"],
                "additional_condition": "updated_at::date = '{{ ds }}'",
            },
        )
        assert run.state == "success"
        recent = _snapshot_rows(name)[800:]
        assert len(recent) == 80 and {r.payload["after"]["updated_at"] for r in recent} == {1709337600000000}
        # a condition the server rejects fails its signal, so the sensor fails the run; streaming goes on
        run = dag.test(run_conf={"data_collections": ["public.items"], "additional_condition": "no_such_column = 1"})
        assert run.state == "failed"
        assert (
            run.get_task_instance("signal").state == "success"
            and run.get_task_instance("wait_for_snapshot").state == "failed"
        )
        # the sensor's retries are for Airflow's scheduler race only (dag_factory.snapshot_dag):
        # a failed snapshot fails at once
        assert (
            dag.get_task("wait_for_snapshot").retries == 2
            and run.get_task_instance("wait_for_snapshot").try_number == 1
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE items SET v = 'after the failure' WHERE id = 1")
        deadline = time.monotonic() + 60
        while not any(r.op == "u" for r in read_topic(f"{name}.public.items")) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert any(
            r.op == "u" and r.payload["after"]["v"] == "after the failure" for r in read_topic(f"{name}.public.items")
        )
    finally:
        stop.set()
        thread.join(30)


def test_backfill_runs_snapshot_their_data_interval(signal_connector: dict[str, str]) -> None:
    """What `airflow backfill create` does per interval, through dag.test() (backfills need a scheduler): the
    docs/snapshots.md's condition on data_interval_start/end, rendered per run, snapshots that interval's rows only."""
    import re
    from datetime import datetime, timezone

    from walflow.airflow.dag_factory import build_connector_dags

    name, dsn = signal_connector["name"], signal_connector["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text, updated_at timestamp NOT NULL)")
        conn.execute(
            "INSERT INTO items SELECT g, 'v' || g, timestamp '2024-03-01' + (g % 5) * interval '1 day' + (g % 7) *"
            " interval '1 hour' FROM generate_series(1, 400) g"
        )
    path = next(Path(os.environ["WALFLOW_CONNECTORS_DIR"]).glob("*.yaml"))
    path.write_text(path.read_text() + "\nsnapshot.mode: no_data\n")
    hand_over(dsn, "items")
    run_dag(f"{name}__setup")
    condition = "updated_at >= '{{ data_interval_start }}' AND updated_at < '{{ data_interval_end }}'"
    stop = threading.Event()
    thread = _stream_in_background(name, dsn, stop)
    try:
        dag = build_connector_dags()[f"{name}__snapshot"]
        seen = 0
        for day in (2, 3):  # the daily runs of 2024-03-01 and 2024-03-02
            run = dag.test(
                logical_date=datetime(2024, 3, day, tzinfo=timezone.utc),
                run_conf={"data_collections": ["public.items"], "additional_condition": condition},
            )
            assert run.state == "success"
            rendered = _signals(dsn)[-1]["additional-condition"]
            start, end = f"2024-03-0{day - 1}", f"2024-03-0{day}"
            assert re.fullmatch(
                rf"updated_at >= '{start}[ T]00:00:00(\+00:00)?' AND updated_at < '{end}[ T]00:00:00(\+00:00)?'",
                str(rendered),
            ), rendered
            rows = _snapshot_rows(name)[seen:]
            seen += len(rows)
            with psycopg.connect(dsn) as conn:
                expected = {
                    r[0]
                    for r in conn.execute(
                        "SELECT id FROM items WHERE updated_at >= %s AND updated_at < %s", (start, end)
                    ).fetchall()
                }
            assert len(expected) == 80 and {r.key_payload["id"] for r in rows} == expected
    finally:
        stop.set()
        thread.join(30)


def _with_callback(
    tmp_path: Path, name: str, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, *settings: str
) -> Path:
    """Connector ``name``'s file and Connections (:func:`airflow_connector`) in this test's environment, its failure
    callback (``tests.e2e.callbacks.record``, which ``settings`` names) writing to the file returned."""
    for key, value in airflow_connector(tmp_path, name, database, kafka_bootstrap, *settings).items():
        monkeypatch.setenv(key, value)
    calls = tmp_path / "callbacks.txt"
    monkeypatch.setenv("WALFLOW_TEST_CALLBACK_FILE", str(calls))
    return calls


def test_dag_docs_owner_callback_and_errors_that_are_not_retried(
    database: str, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doc_md names what each DAG reads, writes and how to recover; owner and failure callback come from the YAML;
    an error that needs a fix (here: another connector owns the slot) fails the stream task at once, without the
    DAG's two retries, and calls the callback."""
    from tests.support import setup
    from walflow.airflow.dag_factory import build_connector_dags
    from walflow.config.connector import parse_config

    name = unique("docs")
    settings = (
        "snapshot.mode: no_data",
        "signal.data.collection: public.walflow_signal",
        "walflow.owner: data-platform",
        "walflow.on.failure.callback: tests.e2e.callbacks.record",
    )
    calls = _with_callback(tmp_path, name, database, kafka_bootstrap, monkeypatch, *settings)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    dags = build_connector_dags()
    setup_dag, stream_dag, snapshot_dag = (dags[f"{name}__{kind}"] for kind in ("setup", "stream", "snapshot"))
    assert f"slot `{name}`" in stream_dag.doc_md and f"`{name}.<schema>.<table>`" in stream_dag.doc_md
    assert f"walflow reset {name} --lake" in stream_dag.doc_md and "not retried" in stream_dag.doc_md
    assert "snapshot.mode=no_data" in setup_dag.doc_md and "public.walflow_signal" in snapshot_dag.doc_md
    assert {t.owner for d in dags.values() for t in d.tasks} == {"data-platform"}
    # the snapshot DAG never runs on its own schedule, and its form requires the tables
    assert snapshot_dag.timetable.periodic and not snapshot_dag.timetable.can_be_scheduled
    assert (
        "data_collections" in snapshot_dag.params
        and snapshot_dag.params.get_param("data_collections").schema["minItems"] == 1
    )

    # another connector takes the slot first: this connector's stream cannot fix that by retrying
    thief = parse_config(
        {
            "name": unique("thief"),
            "topic.prefix": unique("thief"),
            "slot.name": name,
            "publication.name": unique("p"),
            "snapshot.mode": "no_data",
        }
    )
    setup(thief, database)
    run = stream_dag.test()
    assert run.state == "failed"
    ti = run.get_task_instance("stream")
    assert ti.state == "failed" and ti.try_number == 1, (ti.state, ti.try_number)
    assert calls.read_text().startswith("stream: ") and "belongs to connector" in calls.read_text()


def test_the_monitor_dag_fails_on_a_paused_stream_whose_slot_grows(
    database: str, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monitor DAG judges the connector without its stream: while the stream DAG does not run, changes pile up
    in the slot until its retained WAL passes walflow.slot.max.retained.wal.bytes; the monitor's run then fails with
    a message naming the connector, the slot, the figure and the limit, and the connector's failure callback is
    called. Once a stream batch has caught up, the monitor passes."""
    from tests.support import setup, stream
    from walflow.airflow.dag_factory import build_connector_dags
    from walflow.config.files import resolve

    name = unique("mon")
    # beside the other lanes' WAL (the server's, counted from the slot's restart_lsn) between setup and the first check
    limit = 16 << 20
    settings = (
        "snapshot.mode: no_data",
        "walflow.lake.enabled: false",
        f"walflow.slot.max.retained.wal.bytes: {limit}",
        "walflow.on.failure.callback: tests.e2e.callbacks.record",
    )
    calls = _with_callback(tmp_path, name, database, kafka_bootstrap, monkeypatch, *settings)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = resolve(name)
    setup(config, database)
    stream(config, database)
    monitor = build_connector_dags()[f"{name}__monitor"]
    assert monitor.schedule == "*/5 * * * *" or str(monitor.timetable.summary) == "*/5 * * * *"
    run = monitor.test()
    assert run.state == "success", calls.read_text() if calls.exists() else run

    # the stream is paused: nothing reads the slot while the table is written, until the slot holds more than the limit
    with psycopg.connect(database, autocommit=True) as conn:
        while True:
            conn.execute("INSERT INTO t SELECT g, repeat('x', 500) FROM generate_series(1, 2000) g ON CONFLICT (id) "
                         "DO UPDATE SET v = EXCLUDED.v || 'y'")  # fmt: skip
            (retained,) = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (config.slot_name,),
            ).fetchone()
            if retained > limit:
                break
    run = monitor.test()
    assert run.state == "failed"
    ti = run.get_task_instance("monitor")
    assert ti.state == "failed" and ti.try_number == 1
    text = calls.read_text()
    assert text.startswith("monitor: walflow monitor: ") and f"connector {name!r}" in text, text
    assert f"slot {config.slot_name!r} retains " in text and f"walflow.slot.max.retained.wal.bytes={limit}" in text
    figure = int(text.split(" retains ")[1].split(" bytes")[0])
    assert figure > limit

    # streamed again: the slot is caught up and the monitor passes (a checkpoint logs the running transactions, whose
    # record, once decoded, lets the slot's restart_lsn follow its confirmed position)
    stream(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    stream(config, database)
    stream(config, database)
    calls.unlink()
    assert monitor.test().state == "success" and not calls.exists()


#: the DAG folder loaded in a Python where the lake's libraries (walflow's "lake" extra) cannot be imported
_WITHOUT_LAKE = r"""
import importlib.abc, json, sys

# Spark's provider stays: Airflow's provider discovery imports every installed provider's description
BLOCKED = ("pyspark", "pyiceberg", "pyarrow", "snowpark_connect_deps_iceberg")


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
loaded = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED))
print(json.dumps({"dags": sorted(bag.dag_ids), "errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "loaded": loaded}))
"""


def test_the_dag_files_load_without_the_lake_extra(tmp_path: Path) -> None:
    """Without walflow's lake extra's libraries (pyspark, pyiceberg, pyarrow, the Iceberg jar's wheel), a
    connector whose lake is off gets its DAGs and imports none of them; a connector whose lake is on is an import
    error that names the extra. (make test-deploy installs the wheel without the extra for real.)"""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    base = "topic.prefix: {0}\nslot.name: {0}\nwalflow.postgres.conn.id: postgres_default\n"
    (tmp_path / "capture.yaml").write_text("name: capture\n" + base.format("capture") + "walflow.lake.enabled: false\n")
    (tmp_path / "withlake.yaml").write_text("name: withlake\n" + base.format("withlake"))
    env = {**os.environ, "WALFLOW_CONNECTORS_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LAKE, str(root / "dags")], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["loaded"] == [], found["loaded"]
    assert {"capture__setup", "capture__stream"} <= set(found["dags"]) and not any(
        d.startswith("withlake") for d in found["dags"]
    ), found
    # the example DAGs that apply to the lake fail on their own file; the connector's error is in walflow's errors file
    (message,) = [v for k, v in found["errors"].items() if k.endswith("walflow_connector_errors.py")]
    assert "withlake.yaml" in message and "pip install 'walflow[lake]'" in message and "pyspark" in message, message
    assert "capture.yaml" not in message
