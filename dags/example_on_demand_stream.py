"""Streaming on demand: a batch starts as soon as the slot has enough pending WAL, not on a fixed schedule.

``example_on_demand_stream`` runs ``@continuous`` (one run at a time): each run waits in the triggerer (a
deferrable sensor, no worker slot held) until the slot has 64 KiB of WAL to read or two minutes passed, then
streams one batch. It captures ``public.orders`` of the inventory database with a slot of its own; trigger
``example_on_demand_setup`` once to create that slot, then unpause the stream DAG (it is paused when created).

A connector of the factory gets the same wait with ``walflow.stream.trigger.wal.bytes`` in its YAML.
"""

from datetime import datetime

from airflow.sdk import DAG

from walflow.airflow.operators import WalflowSetupOperator, WalflowStreamOperator
from walflow.airflow.sensors import WalflowPendingWalSensor

ORDERS_ONLY = {
    "table.include.list": "public.orders",
    "slot.name": "example_on_demand",
    "publication.name": "example_on_demand",
    "publication.autocreate.mode": "filtered",
    "topic.prefix": "on_demand",
    "signal.data.collection": None,
}

with DAG(
    dag_id="example_on_demand_setup",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["walflow", "example"],
):
    WalflowSetupOperator(task_id="setup", connector="inventory", overrides=ORDERS_ONLY)

with DAG(
    dag_id="example_on_demand_stream",
    schedule="@continuous",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    # a continuous DAG starts its next run when the last one ends: one consumer of the slot at a time
    max_active_runs=1,
    is_paused_upon_creation=True,
    tags=["walflow", "example"],
):
    wait = WalflowPendingWalSensor(
        task_id="wait_for_wal",
        connector="inventory",
        overrides=ORDERS_ONLY,
        min_bytes=64 * 1024,
        max_wait=120,
        poke_interval=5,
        deferrable=True,
    )
    stream = WalflowStreamOperator(task_id="stream", connector="inventory", overrides=ORDERS_ONLY)
    wait >> stream
