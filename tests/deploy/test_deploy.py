"""walflow deployed as users deploy it (``make test-deploy``): the wheel installed into a virtual environment outside
the checkout, and docker-compose.yml's services run as separate processes (tests/deploy/compose.py): Airflow's API
server, scheduler, DAG processor, triggerer and two Celery workers on Redis, its metadata on PostgreSQL, a source
PostgreSQL, the broker, and a Spark standalone master and worker.

Driven only through Airflow's REST API with a token, as an operator would: the DAGs are unpaused and triggered there,
the stream DAG runs on its own (``@continuous``, its deferrable sensor waiting in the triggerer), its apply task
submits to the Spark cluster, a snapshot is taken with the form's parameters. Then the scheduler, the triggerer and
the worker running a stream task are killed with SIGKILL in the middle of a batch and started again: the lake ends
equal to the source, row by row, with nothing lost or duplicated, and no two stream tasks of the connector ran at once.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.deploy.compose import LocalCompose

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("customers", "products", "orders")

pytestmark = pytest.mark.timeout(1800)


def say(message: str) -> None:
    print(f"[deploy] {message}", flush=True)


def wait_for(check: Callable[[], Any], seconds: float, what: str, every: float = 2.0) -> Any:
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, psycopg.OperationalError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {seconds:.0f} s (last: {last!r})")


class Api:
    """Airflow's REST API as an operator uses it: a token from /auth/token, then /api/v2."""

    def __init__(self, base: str, password: str) -> None:
        self.base = base
        answer = self._call("POST", "/auth/token", {"username": "admin", "password": password}, token=None)
        self.token = answer["access_token"]

    def _call(self, method: str, path: str, body: Any = None, token: str | None = "") -> Any:
        request = urllib.request.Request(
            self.base + path, method=method, data=None if body is None else json.dumps(body).encode()
        )
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token or self.token}")
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read() or b"null")

    def get(self, path: str) -> Any:
        return self._call("GET", path)

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        run = self._call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.request.quote(run_id, safe='')}")["state"])

    def wait_run(self, dag_id: str, run_id: str, seconds: float = 600) -> None:
        def finished() -> str | None:
            state = self.run_state(dag_id, run_id)
            if state == "failed":
                raise AssertionError(f"{dag_id} run {run_id} failed")
            return state if state == "success" else None

        wait_for(finished, seconds, f"{dag_id} run {run_id} to succeed")


@pytest.fixture(scope="module")
def deployment() -> Iterator[LocalCompose]:
    from sandbox.embedded import _as_pg_user, ensure_java, pg_bindir, tansu_binary

    ensure_java()
    venv = Path(os.environ["WALFLOW_DEPLOY_VENV"])
    root = Path(os.environ["WALFLOW_DEPLOY_ROOT"]) / "compose"
    compose = LocalCompose(
        ROOT / "docker-compose.yml", root, venv, pg_bindir(), tansu_binary(), _as_pg_user,
        # a killed scheduler's tasks are adopted after 15 s and a killed task found dead after 30 s, instead of
        # Airflow's 5 minutes each (docs/deploy.md, troubleshooting)
        overrides={"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
                   "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
                   "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120"},
    )  # fmt: skip
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import walflow; print(walflow.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    location = Path(installed.stdout.strip())
    say(f"walflow is imported from {location} (the checkout is {ROOT})")
    assert not location.is_relative_to(ROOT), location
    # the connector a user adds beside the example: streaming when WAL is pending (the sensor defers to the
    # triggerer), applying to the lake on the Spark cluster
    example = subprocess.run(
        [str(venv / "bin" / "walflow"), "example-connector"], capture_output=True, text=True, check=True
    ).stdout
    # (each batch writes its state into the source, some WAL itself: the threshold lies above that, so that an idle
    # connector's sensor defers)
    settings = {"walflow.stream.trigger.wal.bytes": "65536", "walflow.stream.trigger.max.wait.seconds": "20",
                "walflow.stream.trigger.poke.seconds": "2", "walflow.batch.max.seconds": "60"}  # fmt: skip
    lines = [line for line in example.splitlines() if line.partition(":")[0] not in (*settings, "walflow.schedule")]
    lines += [f"{key}: {value}" for key, value in settings.items()]
    connectors = compose.local_path("airflow-scheduler", "/opt/airflow/connectors")
    connectors.mkdir(parents=True, exist_ok=True)
    (connectors / "inventory.yaml").write_text("\n".join(lines) + "\n")
    env = compose.environment("airflow-scheduler", 0)
    say(f"executor {env['AIRFLOW__CORE__EXECUTOR']}, "
        f"metadata database {env['AIRFLOW__DATABASE__SQL_ALCHEMY_CONN'].split('@')[-1]}, "
        f"AIRFLOW_HOME {env['AIRFLOW_HOME']}, connectors {env['WALFLOW_CONNECTORS_DIR']}")  # fmt: skip
    try:
        compose.up(say)
        yield compose
    finally:
        for process in (p for replicas in compose.processes.values() for p in replicas):
            if process.popen.poll() not in (None, 0):
                say(f"{process.name} exited with {process.popen.returncode}: {process.log}")
        compose.down()


def source_dsn(compose: LocalCompose, user: str = "postgres") -> str:
    password = compose.dotenv["POSTGRES_PASSWORD"]
    return f"host=127.0.0.1 port={compose.port('postgres', 5432)} dbname=inventory user={user} password={password}"


def lake_differences(compose: LocalCompose) -> list[str]:
    from tests.lakecheck import differences

    warehouse = str(compose.local_path("airflow-scheduler", "/opt/walflow/warehouse"))
    found: list[str] = []
    for table in TABLES:
        found += differences(source_dsn(compose), "inventory", f"public__{table}", "public", table, warehouse)
    return found


def lake_keys(compose: LocalCompose, table: str) -> list[int]:
    from tests.support import lake_rows

    return [
        row["id"]
        for row in lake_rows(
            "inventory", f"public__{table}", str(compose.local_path("airflow-scheduler", "/opt/walflow/warehouse"))
        )
    ]


def stream_tries(compose: LocalCompose) -> list[tuple[Any, Any, str, str]]:
    """Every try of the stream task, from Airflow's metadata database: (start, end, state, hostname)."""
    password = compose.dotenv["AIRFLOW_DB_PASSWORD"]
    dsn = f"host=127.0.0.1 port={compose.port('airflow-db', 5432)} dbname=airflow user=airflow password={password}"
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT start_date, end_date, state, hostname FROM task_instance WHERE dag_id = 'inventory__stream' AND"
            " task_id = 'stream' UNION ALL SELECT start_date, end_date, state, hostname FROM task_instance_history "
            "WHERE dag_id = 'inventory__stream' AND task_id = 'stream' ORDER BY 1"
        ).fetchall()
    return [(r[0], r[1], str(r[2]), str(r[3])) for r in rows if r[0] is not None]


def topic_end(compose: LocalCompose, topic: str) -> int:
    """The sum of the topic's partitions' end offsets (0 when it has none yet)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": f"127.0.0.1:{compose.port('kafka', 9092)}", "group.id": "walflow-deploy-test"}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        partitions = list(metadata.partitions) if metadata is not None and metadata.error is None else []
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def make_changes(compose: LocalCompose, rounds: int = 1) -> None:
    with psycopg.connect(source_dsn(compose), autocommit=True) as conn:
        for i in range(rounds):
            conn.execute(
                "INSERT INTO customers (first_name, last_name, email) SELECT 'f' || g, 'l' || g,"
                " 'c' || g || '.' || %s || '@example.com' FROM generate_series(1, 20) g", (f"{time.time_ns()}{i}",),
            )  # fmt: skip
            conn.execute(
                "INSERT INTO orders (order_date, purchaser, quantity, product_id) SELECT current_date, "
                "(SELECT max(id) FROM customers), g % 7 + 1, (SELECT min(id) FROM products)"
                " FROM generate_series(1, 30) g"
            )
            conn.execute("UPDATE products SET price = price + 1 WHERE id = (SELECT min(id) FROM products)")
            conn.execute("DELETE FROM orders WHERE id IN (SELECT id FROM orders ORDER BY id LIMIT 3)")


def test_walflow_runs_in_a_deployment_and_survives_its_components_killed(deployment: LocalCompose) -> None:
    compose = deployment
    api = Api(f"http://127.0.0.1:{compose.port('airflow-apiserver', 8080)}", compose.dotenv["AIRFLOW_ADMIN_PASSWORD"])
    for replicas in compose.processes.values():
        for process in replicas:
            say(f"component {process.name}: pid {process.popen.pid}, {' '.join(process.command)[:120]}")

    def dag_ids() -> set[str] | None:
        errors = api.get("/api/v2/importErrors")
        assert errors["total_entries"] == 0, errors
        ids = {d["dag_id"] for d in api.get("/api/v2/dags?limit=100")["dags"]}
        return (
            ids
            if {"inventory__setup", "inventory__stream", "inventory__maintain", "inventory__snapshot"} <= ids
            else None
        )

    say(f"the DAG processor parsed {sorted(wait_for(dag_ids, 300, 'the connector DAGs in the API'))}")

    api.unpause("inventory__setup")
    api.wait_run("inventory__setup", api.trigger("inventory__setup"))
    say("setup ran: slot, publication and the initial snapshot")
    make_changes(compose)
    api.unpause("inventory__stream")  # @continuous: runs one after another from here on, on their own
    wait_for(
        lambda: not lake_differences(compose), 600, "the lake equal to the source after the first changes", every=5
    )
    say("the lake equals the source (stream DAG on its own schedule, apply on the Spark cluster)")

    def deferred() -> Any:
        found = api.get("/api/v2/dags/inventory__stream/dagRuns/~/taskInstances?state=deferred")["task_instances"]
        return [t["task_id"] for t in found]

    say(
        f"idle, the stream DAG's sensor waits in the triggerer:"
        f" {wait_for(deferred, 240, 'a deferred wait_for_wal', every=1)} deferred"
    )

    # a snapshot taken through the REST API with the form's parameters
    api.unpause("inventory__snapshot")
    run = api.trigger("inventory__snapshot", {"data_collections": ["public.products"], "snapshot_type": "incremental",
                                              "additional_condition": "price > 0", "surrogate_key": None})  # fmt: skip
    api.wait_run("inventory__snapshot", run)
    wait_for(lambda: not lake_differences(compose), 300, "the lake equal to the source after the snapshot", every=5)
    say("snapshot of public.products through the REST API: done, the lake equals the source")

    # the walflow page's route, served by the deployed API server from the installed wheel's plugin
    status = api.get("/walflow/api/status/inventory")
    lake_tables = {t["table"]: t for t in status["lake"]["tables"]}
    assert status["source"]["exists"] and status["source"]["history"], status["source"]
    assert "error" not in status["lake"] and "kafka_error" not in status["lake"], status["lake"]
    assert lake_tables["inventory.public__products"]["records_behind"] >= 0, lake_tables
    assert status["dags"]["monitor"]["paused"] is False, status["dags"]
    say(
        f"the walflow page's route: {status['state']}, {len(lake_tables)} lake table(s), "
        f"{len(status['source']['history'])} batch(es) in the history"
    )

    # the kill round: a batch big enough to be caught in the middle
    before = len(stream_tries(compose))
    with psycopg.connect(source_dsn(compose), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO orders (order_date, purchaser, quantity, product_id) SELECT current_date, "
            "(SELECT min(id) FROM customers), g % 5 + 1, (SELECT min(id) FROM products)"
            " FROM generate_series(1, 200000) g"
        )

    def running_stream_try() -> Any:
        for start, end, state, _hostname in stream_tries(compose)[before:]:
            if state == "running" and end is None:
                return start
        return None

    killed_start = wait_for(running_stream_try, 300, "a stream task running the big batch", every=0.5)
    # in the middle of the batch: its events are reaching the topic, the batch has not ended
    topic = "inventory.public.orders"
    produced_before = topic_end(compose, topic)
    produced = wait_for(
        lambda: (topic_end(compose, topic) - produced_before) or None,
        300,
        "the big batch's events reaching Kafka",
        every=0.2,
    )
    victims = [
        compose.processes["airflow-scheduler"][0],
        compose.processes["airflow-triggerer"][0],
        _worker_running_stream(compose),
    ]
    say(f"the stream task (started {killed_start}) has produced {produced} of the batch's events so far")
    for process in victims:
        compose.kill(process)
        say(f"SIGKILL {process.name} (pid {process.popen.pid})")
    time.sleep(2)
    for process in victims:
        compose.start(process.service, process.replica, say)
    wait_for(lambda: not lake_differences(compose), 900, "the lake equal to the source after the kill round", every=5)
    keys = lake_keys(compose, "orders")
    duplicated = len(keys) - len(set(keys))
    with psycopg.connect(source_dsn(compose)) as conn:
        (source_count,) = conn.execute("SELECT count(*) FROM orders").fetchone()  # type: ignore[misc]  # count(*) always returns a row
    lost = source_count - len(set(keys))
    say(
        f"after the kill round: orders {source_count} in the source, {len(keys)} in the lake: {lost} lost,"
        f" {duplicated} duplicated"
    )
    assert lost == 0 and duplicated == 0

    tries = stream_tries(compose)
    for (start, end, state, host), (next_start, *_rest) in itertools.pairwise(tries):
        assert end is not None and end <= next_start, (
            f"two stream tasks at once: {start}..{end} ({state}, {host}) and one from {next_start}"
        )
    say(f"{len(tries)} stream tries, none overlapping another; states {sorted({t[2] for t in tries})}")
    (killed,) = [t for t in tries if t[0] == killed_start]
    assert killed[2] != "success", f"the killed stream try ended {killed[2]}"
    say(f"the killed try ended {killed[2]} ({killed[3]}); the batch was streamed again by the tries after it")


def _worker_running_stream(compose: LocalCompose) -> Any:
    """The Celery worker replica whose process tree streams: the process at the client end of the stream's
    connection to the source (``application_name`` walflow:inventory:stream), followed up its parents."""
    with psycopg.connect(source_dsn(compose)) as conn:
        ports = [
            r[0]
            for r in conn.execute(
                "SELECT client_port FROM pg_stat_activity WHERE application_name = 'walflow:inventory:stream'"
            )
        ]
    assert ports, "no stream connection on the source"
    workers = {p.popen.pid: p for p in compose.processes["airflow-worker"] if p.popen.poll() is None}
    for port in ports:
        listing = subprocess.run(["ss", "-tnpH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
        for pid in (int(x) for x in re.findall(r"pid=(\d+)", listing)):
            while pid > 1:
                if pid in workers:
                    return workers[pid]
                pid = parent_of(pid)
    raise AssertionError(f"no Celery worker runs the stream task (its connection from port(s) {ports})")


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])
