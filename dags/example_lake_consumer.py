"""A downstream DAG scheduled on a lake table: it runs whenever the inventory stream DAG's Spark job updates
``inventory.public__orders``, and reads that Iceberg table with pyiceberg (no Spark needed), through the connector's
catalog: its JDBC catalog (``walflow.lake.catalog.conn.id``) or else the Hadoop catalog's warehouse folder.

The Asset URI is the one the ``apply_to_lake`` task of ``inventory__stream`` declares as its outlet.
"""

from __future__ import annotations

import logging
from datetime import datetime

from airflow.sdk import DAG, Asset, Param, task

ORDERS = Asset("iceberg://lake/inventory/public__orders")
log = logging.getLogger(__name__)

with DAG(
    dag_id="example_lake_consumer",
    schedule=[ORDERS],
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["walflow", "example", "lake"],
    params={
        "connector": Param("inventory", type="string", description="the walflow connector whose lake to read"),
        "table": Param("public__orders", type="string", description="lake table, <schema>__<table>"),
    },
):

    @task
    def summarize(params: dict | None = None) -> dict:
        from walflow.airflow.status import lake_catalog
        from walflow.config.files import resolve
        from walflow.lake import LakeSettings, read_lake_table

        assert params is not None
        config = resolve(params["connector"])
        settings = LakeSettings.from_config(config)
        table = read_lake_table(settings, params["table"], lake_catalog(config))
        if table is None:
            raise FileNotFoundError(
                f"lake table {settings.namespace}.{params['table']} of connector {config.name} does not exist"
            )
        rows = table.scan().to_arrow()
        ops = rows.group_by("_walflow_op").aggregate([("_walflow_op", "count")]).to_pylist()
        summary = {
            "rows": rows.num_rows,
            "by_last_op": {r["_walflow_op"]: r["_walflow_op_count"] for r in ops},
            "snapshot": table.current_snapshot().snapshot_id,
        }
        log.info("lake table %s.%s: %s", settings.namespace, params["table"], summary)
        return summary

    summarize()
