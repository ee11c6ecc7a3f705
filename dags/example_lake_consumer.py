"""A downstream DAG scheduled on a lake table: it runs whenever the inventory stream DAG's Spark job updates
``inventory.public__orders``, and reads that Iceberg table with pyiceberg (no Spark needed).

The Asset URI is the one the ``apply_to_lake`` task of ``inventory__stream`` declares as its outlet.
"""

from __future__ import annotations

import logging
import os
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
        "namespace": Param("inventory", type="string", description="Iceberg namespace (the connector's topic prefix)"),
        "table": Param("public__orders", type="string", description="lake table, <schema>__<table>"),
    },
):

    @task
    def summarize(params: dict | None = None) -> dict:
        from walflow.lake import read_hadoop_table

        assert params is not None
        table = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], params["namespace"], params["table"])
        if table is None:
            raise FileNotFoundError(f"lake table {params['namespace']}.{params['table']} does not exist under {os.environ['WALFLOW_WAREHOUSE']}")
        rows = table.scan().to_arrow()
        ops = rows.group_by("_walflow_op").aggregate([("_walflow_op", "count")]).to_pylist()
        summary = {"rows": rows.num_rows, "by_last_op": {r["_walflow_op"]: r["_walflow_op_count"] for r in ops}, "snapshot": table.current_snapshot().snapshot_id}
        log.info("lake table %s.%s: %s", params["namespace"], params["table"], summary)
        return summary

    summarize()
