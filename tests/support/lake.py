"""The lake as the tests read it: its tables through pyiceberg (an independent reader, not the lake job's Spark),
the connector's lake settings, and the JDBC catalog's check."""

from __future__ import annotations

import os
from typing import Any

import psycopg

from tests.support.postgres import pg_dsn
from walflow.config.connector import ConnectorConfig


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


def lake_settings(config: ConnectorConfig, warehouse: str | None = None, **overrides: Any) -> Any:
    """The connector's :class:`walflow.lake.settings.LakeSettings`, with ``overrides``."""
    from walflow.lake.settings import LakeSettings

    return LakeSettings.from_config(config, **({"warehouse": warehouse} if warehouse else {}), **overrides)


def assert_items_in_jdbc_lake(name: str, database: str, catalog_database: str) -> None:
    """Connector ``name``'s lake table of the source table ``items`` (id, v, n) through its JDBC catalog in
    ``catalog_database``: the catalog's own table names it, pyiceberg's SQL catalog reads it equal to the source,
    and ``walflow status`` counts as many rows."""
    from walflow.airflow.status import status
    from walflow.config.files import resolve
    from walflow.lake import JdbcCatalog, LakeSettings, read_lake_table

    settings = LakeSettings.from_config(resolve(name))
    with psycopg.connect(pg_dsn(catalog_database)) as conn:
        names = conn.execute(
            "SELECT catalog_name, table_namespace, table_name, iceberg_type FROM iceberg_tables"
        ).fetchall()
    assert (settings.catalog, name, "public__items", "TABLE") in names, names
    params = dict(p.split("=", 1) for p in pg_dsn(catalog_database).split())
    jdbc = JdbcCatalog(
        host=params["host"],
        port=int(params["port"]),
        database=catalog_database,
        user=params["user"],
        password=params.get("password"),
    )
    table = read_lake_table(settings, "public__items", jdbc)
    assert table is not None
    lake = {r["id"]: (r["v"], r["n"]) for r in table.scan().to_arrow().to_pylist()}
    with psycopg.connect(database) as conn:
        source = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, v, n FROM items").fetchall()}
    assert lake == source
    report = status(name, dsn=database)
    assert "JDBC catalog" in report["lake"]["warehouse"]
    assert {t["table"]: t["rows"] for t in report["lake"]["tables"]}[f"{name}.public__items"] == len(source)
