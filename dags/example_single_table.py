"""Reusing walflow's operators in your own DAG: capture one table of the inventory database.

The connector settings come from include/connectors/inventory.yaml; ``overrides`` narrows them to
``public.customers`` with a slot, publication and topic prefix of its own, so it runs beside the
inventory connector without sharing its slot.
"""

from datetime import datetime

from airflow.sdk import DAG

from walflow.airflow.operators import WalflowSetupOperator, WalflowStreamOperator

CUSTOMERS_ONLY = {
    "table.include.list": "public.customers",
    "slot.name": "example_customers",
    "publication.name": "example_customers",
    "publication.autocreate.mode": "filtered",
    "topic.prefix": "example",
}

with DAG(
    dag_id="example_customers_cdc",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["walflow", "example"],
):
    setup = WalflowSetupOperator(task_id="setup", connector="inventory", overrides=CUSTOMERS_ONLY)
    stream = WalflowStreamOperator(task_id="stream", connector="inventory", overrides=CUSTOMERS_ONLY)
    setup >> stream
