"""The pending-WAL sensor and its trigger: poke first, defer only to wait, fire on the threshold or the deadline.

The sensor and the trigger read the source through an Airflow Connection (defined in the environment, as the
triggerer and workers would see it); the trigger is driven with asyncio the way the triggerer runs it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import airflow_connector, prepare_source, read_topic, unique
from walflow.airflow.sensors import WalflowPendingWalSensor, WalflowSnapshotSensor
from walflow.airflow.triggers import WalflowPendingWalTrigger, WalflowSnapshotTrigger
from walflow.config.files import resolve
from walflow.source.connection import connect
from walflow.source.health import pending_wal_bytes

pytestmark = pytest.mark.timeout(300)


def test_trigger_serialize_round_trip() -> None:
    """What the triggerer stores (``serialize()``) rebuilds an equal trigger: nothing is lost or added."""
    trigger = WalflowPendingWalTrigger(
        slot_name="s1",
        min_bytes=4096,
        postgres_conn_id="pg",
        conninfo_options={"sslmode": "require"},
        deadline=1_700_000_000.5,
        poll_interval=0.25,
        initial_statements="SET lock_timeout = 1000",
    )
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    assert cls is WalflowPendingWalTrigger
    again = cls(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert kwargs["conninfo_options"] == {"sslmode": "require"} and kwargs["deadline"] == 1_700_000_000.5
    # no secret travels with the trigger: only the Connection's id
    assert "password" not in repr(kwargs).lower()


def test_sensors_defer_by_default_where_airflow_is_configured_so() -> None:
    """``deferrable`` defaults to Airflow's ``[operators] default_deferrable``, as in Airflow's own providers."""
    import subprocess
    import sys

    code = (
        "from walflow.airflow.sensors import WalflowPendingWalSensor, WalflowSnapshotSensor\n"
        "print(WalflowPendingWalSensor(task_id='w', connector='c').deferrable, "
        "WalflowSnapshotSensor(task_id='s', connector='c', signal_id='x').deferrable, "
        "WalflowSnapshotSensor(task_id='t', connector='c', signal_id='x', deferrable=False).deferrable)"
    )
    for setting, expected in (("true", "True True False"), ("false", "False False False")):
        env = {**os.environ, "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": setting}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
        ).stdout
        assert out.strip().splitlines()[-1] == expected


@pytest.fixture()
def wal_connector(
    tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    name = unique("wal")
    for key, value in airflow_connector(
        tmp_path, name, database, kafka_bootstrap, "snapshot.mode: no_data", "walflow.lake.enabled: false"
    ).items():
        monkeypatch.setenv(key, value)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = resolve(name)
    prepare_source(config, database)
    return {"name": name, "dsn": database, "config": config}


def write(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(coalesce((SELECT max(id) FROM t), 0) + 1,"
            " coalesce((SELECT max(id) FROM t), 0) + %s) g",
            (rows,),
        )


def pending(dsn: str, slot: str) -> int:
    with connect(dsn) as conn:
        return pending_wal_bytes(conn, slot)


@pytest.mark.disruptive  # the server's pending WAL: nothing else may write beside it
def test_sensor_returns_once_writes_pass_the_threshold(wal_connector: dict[str, Any]) -> None:
    name, dsn, slot = wal_connector["name"], wal_connector["dsn"], wal_connector["config"].slot_name
    threshold = pending(dsn, slot) + 256 * 1024
    sensor = WalflowPendingWalSensor(task_id="wait", connector=name, min_bytes=threshold, max_wait=3600)
    first = sensor.poke({})
    assert not first.is_done
    write(dsn, 3000)  # ~ 700 KB of WAL
    assert pending(dsn, slot) >= threshold
    done = sensor.poke({})
    assert done.is_done and done.xcom_value["reason"] == "threshold"
    assert done.xcom_value["pending_wal_bytes"] >= threshold

    # poke mode through execute(): nothing to wait for, so the time limit ends the wait, successfully
    idle = WalflowPendingWalSensor(task_id="idle", connector=name, min_bytes=1 << 40, max_wait=1, poke_interval=0.2)
    started = time.monotonic()
    result = idle.execute({})
    assert result["reason"] == "max_wait" and time.monotonic() - started >= 1


def test_snapshot_trigger_ends_with_an_error_when_the_state_cannot_be_read(
    wal_connector: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state table the trigger cannot read is an error event at once (waiting cannot make it appear), which fails
    the sensor with the cause and what to check; a server it cannot reach is tried again at each poll."""
    name = wal_connector["name"]
    monkeypatch.setenv("AIRFLOW_CONN_WALFLOW_NOWHERE", "postgresql://nobody:secret@127.0.0.1:9/none")
    unreachable = WalflowSnapshotTrigger(
        signal_id="adhoc-1",
        connector=name,
        state_table=("public", "walflow_state"),
        postgres_conn_id="walflow_nowhere",
        poll_interval=0.2,
    )

    async def still_waiting_after(seconds: float) -> bool:
        task = asyncio.ensure_future(anext(unreachable.run()))
        await asyncio.sleep(seconds)
        waiting = not task.done()
        task.cancel()
        return waiting

    assert asyncio.run(still_waiting_after(1.5)), "the trigger gave up on a server it could not reach"
    trigger = WalflowSnapshotTrigger(
        signal_id="adhoc-1",
        connector=name,
        state_table=("public", "no_such_state"),
        postgres_conn_id=f"{name}_pg",
        poll_interval=0.2,
    )
    classpath, kwargs = trigger.serialize()
    assert WalflowSnapshotTrigger(**kwargs).serialize() == (classpath, kwargs)
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), 30)).payload
    assert event["status"] == "error" and event["signal_id"] == "adhoc-1"
    assert (
        "public.no_such_state" in event["error"]
        and "does not exist" in event["error"]
        and "walflow.state.table" in event["error"]
    )
    from airflow.sdk.exceptions import AirflowException

    sensor = WalflowSnapshotSensor(task_id="wait", connector=name, signal_id="adhoc-1", deferrable=True)
    with pytest.raises(AirflowException, match="no_such_state"):
        sensor.execute_complete({}, event)


# pending WAL is the whole server's: another test writing beside this one would fire the trigger early
@pytest.mark.disruptive
def test_deferrable_sensor_defers_and_its_trigger_fires_on_threshold_and_deadline(
    wal_connector: dict[str, Any],
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    name, dsn, slot = wal_connector["name"], wal_connector["dsn"], wal_connector["config"].slot_name
    threshold = pending(dsn, slot) + 256 * 1024
    sensor = WalflowPendingWalSensor(
        task_id="wait", connector=name, min_bytes=threshold, max_wait=60, poke_interval=0.2, deferrable=True
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, WalflowPendingWalTrigger) and trigger.min_bytes == threshold
    assert deferred.value.method_name == "execute_complete"

    async def run_until_event(trig: WalflowPendingWalTrigger, writes: int = 0) -> dict[str, Any]:
        task = asyncio.ensure_future(anext(trig.run()))
        await asyncio.sleep(0.5)
        assert not task.done(), "the trigger fired before there was anything to stream"
        if writes:
            # the writer runs in a thread, as another client would; the trigger's loop keeps polling meanwhile
            await asyncio.to_thread(write, dsn, writes)
        event = await asyncio.wait_for(task, 30)
        return event.payload

    event = asyncio.run(run_until_event(trigger, writes=3000))
    assert event["status"] == "threshold" and event["pending_wal_bytes"] >= threshold
    assert sensor.execute_complete({}, event)["reason"] == "threshold"

    # a deadline a second away and a threshold nobody reaches: the trigger fires at the deadline
    late = WalflowPendingWalTrigger(
        slot_name=slot, min_bytes=1 << 40, postgres_conn_id=f"{name}_pg", deadline=time.time() + 1.5, poll_interval=0.2
    )
    started = time.monotonic()
    event = asyncio.run(run_until_event(late))
    assert event["status"] == "deadline" and time.monotonic() - started >= 1.0
    assert sensor.execute_complete({}, event)["reason"] == "max_wait"

    # a slot that does not exist ends the wait with an error, which fails the task
    gone = WalflowPendingWalTrigger(
        slot_name="no_such_slot", min_bytes=1, postgres_conn_id=f"{name}_pg", poll_interval=0.2
    )
    event = asyncio.run(asyncio.wait_for(anext(gone.run()), 30)).payload
    assert event["status"] == "error" and "does not exist" in event["message"]
    from airflow.sdk.exceptions import AirflowException

    with pytest.raises(AirflowException, match="does not exist"):
        sensor.execute_complete({}, event)


def test_on_demand_stream_dag_waits_then_streams(
    wal_connector: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the opt-in (``walflow.stream.trigger.wal.bytes``), the factory's stream DAG runs ``@continuous`` and
    waits in a deferred sensor before streaming; Airflow runs it (dag.test runs the trigger in-process).

    The opt-in is given by patching the factory's reader, so the test does not depend on the key's validation.
    """
    from tests.support import run_dag
    from walflow.airflow import dag_factory

    name, dsn = wal_connector["name"], wal_connector["dsn"]
    monkeypatch.setattr(dag_factory, "stream_trigger_bytes", lambda config: 16 * 1024 if config.name == name else None)
    dag = dag_factory.build_connector_dags()[f"{name}__stream"]
    assert type(dag.timetable).__name__ == "ContinuousTimetable" and dag.max_active_runs == 1
    assert [t.task_id for t in dag.get_task("wait_for_wal").downstream_list] == ["stream"]
    write(dsn, 500)
    run_dag(f"{name}__stream")
    assert len(read_topic(f"{name}.public.t")) == 500


def test_example_dag_is_continuous_with_one_run_at_a_time() -> None:
    from airflow.dag_processing.dagbag import DagBag

    path = Path(__file__).resolve().parents[2] / "dags" / "example_on_demand_stream.py"
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    dag = bag.dags["example_on_demand_stream"]
    assert dag.max_active_runs == 1 and type(dag.timetable).__name__ == "ContinuousTimetable"
    wait = dag.get_task("wait_for_wal")
    assert isinstance(wait, WalflowPendingWalSensor) and wait.deferrable
    assert [t.task_id for t in wait.downstream_list] == ["stream"]
