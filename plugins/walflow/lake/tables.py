"""Reading lake tables without Spark (pyiceberg), and the lake's catalog: for ``walflow status``, the demo,
downstream DAGs and tests.

The lake's Iceberg catalog is either a Hadoop catalog on a folder (the default: no service, each table's metadata
names its current version) or Iceberg's JDBC catalog on a PostgreSQL database (:class:`JdbcCatalog`): two tables,
``iceberg_tables`` and ``iceberg_namespace_properties``, that Spark (Iceberg's Java ``JdbcCatalog``) and pyiceberg
(``SqlCatalog``) both read and write, so that other engines and services find the tables by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walflow.lake.settings import LakeSettings


def read_hadoop_table(warehouse: str, namespace: str, table: str) -> Any | None:
    """A lake table of a Hadoop catalog opened with pyiceberg, or None if it does not exist.

    The Hadoop catalog keeps no catalog service: the table is ``<warehouse>/<namespace>/<table>``, and
    ``metadata/version-hint.text`` names its current metadata file.
    """
    from pyiceberg.table import StaticTable

    folder = Path(warehouse) / namespace / table / "metadata"
    hint = folder / "version-hint.text"
    if not hint.exists():
        return None
    return StaticTable.from_metadata(str(folder / f"v{hint.read_text().strip()}.metadata.json"))


@dataclass(frozen=True)
class JdbcCatalog:
    """Iceberg's JDBC catalog on a PostgreSQL database (from an Airflow Connection: see
    :class:`walflow.airflow.hooks.WalflowIcebergCatalogHook`).

    Spark writes it through Iceberg's ``JdbcCatalog`` (catalog type ``jdbc``, schema version ``V1``, whose
    ``iceberg_type`` column pyiceberg's ``SqlCatalog`` also reads); pyiceberg reads it through SQLAlchemy on
    psycopg 3. Both name the catalog as Spark does (``walflow.lake.catalog``): it is a column of its rows.
    """

    host: str
    port: int
    database: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    #: libpq/JDBC connection options both drivers understand (``sslmode``, ``sslrootcert``...)
    options: dict[str, str] = field(default_factory=dict)

    def jdbc_url(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}" + (f"?{query}" if query else "")

    def spark_conf(self, catalog: str, warehouse: str) -> tuple[dict[str, str], dict[str, str]]:
        """Spark settings of the catalog named ``catalog``: those that may be shown, and those that hold secrets
        (the password), which reach the job through its environment, never its command line."""
        prefix = f"spark.sql.catalog.{catalog}"
        public = {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": self.jdbc_url(),
            # V1 adds the iceberg_type column (tables or views) that pyiceberg's SqlCatalog reads and writes too
            f"{prefix}.jdbc.schema-version": "V1",
            f"{prefix}.warehouse": warehouse,
        }
        if self.user:
            public[f"{prefix}.jdbc.user"] = self.user
        secret = {f"{prefix}.jdbc.password": self.password} if self.password else {}
        return public, secret

    def describe(self, warehouse: str) -> str:
        """Where the lake is, for ``walflow status`` (no credential)."""
        return f"JDBC catalog {self.jdbc_url()}, warehouse {warehouse}"

    def sqlalchemy_url(self) -> str:
        from sqlalchemy.engine import URL

        url = URL.create(
            "postgresql+psycopg",
            username=self.user,
            password=self.password,
            host=self.host,
            port=self.port,
            database=self.database,
            query=self.options,
        )
        return url.render_as_string(hide_password=False)

    def pyiceberg(self, catalog: str, warehouse: str) -> Any:
        """pyiceberg's ``SqlCatalog`` on the same tables as Spark's catalog ``catalog``."""
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(catalog, uri=self.sqlalchemy_url(), warehouse=warehouse)


@dataclass(frozen=True)
class PropertiesCatalog:
    """Any other Iceberg catalog (REST, Hive, Glue, Nessie...), given by Iceberg's catalog properties from an Airflow
    Connection (see :class:`walflow.airflow.hooks.WalflowIcebergCatalogHook`): ``type`` or ``catalog-impl``,
    ``uri``, ``warehouse``, ``credential``/``token``, ``s3.*``... Spark (``spark.sql.catalog.<name>.<property>``)
    and pyiceberg (``load_catalog``) take the same property names."""

    #: every property, credentials included (kept out of its repr)
    properties: dict[str, str] = field(default_factory=dict, repr=False)

    def spark_conf(self, catalog: str, warehouse: str) -> tuple[dict[str, str], dict[str, str]]:
        """Spark settings of the catalog named ``catalog``: the class may be shown; every property of the Connection
        reaches the job through its environment (they may hold credentials), never its command line."""
        prefix = f"spark.sql.catalog.{catalog}"
        secret = {f"{prefix}.{key}": value for key, value in self.properties.items()}
        secret.setdefault(f"{prefix}.warehouse", warehouse)
        return {prefix: "org.apache.iceberg.spark.SparkCatalog"}, secret

    def pyiceberg(self, catalog: str, warehouse: str) -> Any:
        """pyiceberg's catalog of the same properties."""
        from pyiceberg.catalog import load_catalog

        return load_catalog(catalog, **{"warehouse": warehouse, **self.properties})

    def describe(self, warehouse: str) -> str:
        """Where the lake is, for ``walflow status``: the catalog's kind and address, never a credential."""
        kind = self.properties.get("type") or self.properties.get("catalog-impl") or "Iceberg"
        uri = self.properties.get("uri")
        return f"{kind} catalog{f' {uri}' if uri else ''}, warehouse {self.properties.get('warehouse', warehouse)}"

    def hadoop_warehouse(self, warehouse: str) -> str | None:
        """The folder of a Hadoop catalog (``type: hadoop``), which pyiceberg reads without a catalog; else None."""
        return self.properties.get("warehouse", warehouse) if self.properties.get("type") == "hadoop" else None


def read_lake_table(
    settings: LakeSettings, table: str, catalog: JdbcCatalog | PropertiesCatalog | None = None
) -> Any | None:
    """The lake table ``table`` (``<schema>__<table>``) of a connector opened with pyiceberg, or None if it does
    not exist: through the JDBC catalog when there is one, else from the Hadoop catalog's folder."""
    folder = _hadoop_folder(settings, catalog)
    if folder is not None or catalog is None:
        return read_hadoop_table(folder or settings.warehouse, settings.namespace, table)
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.pyiceberg(settings.catalog, settings.warehouse).load_table((settings.namespace, table))
    except NoSuchTableError:
        return None


def lake_table_names(settings: LakeSettings, catalog: JdbcCatalog | PropertiesCatalog | None = None) -> list[str]:
    """The names of the connector's lake tables (its namespace's)."""
    hadoop = _hadoop_folder(settings, catalog)
    if hadoop is not None or catalog is None:
        folder = Path(hadoop or settings.warehouse) / settings.namespace
        return sorted(p.name for p in folder.glob("*") if (p / "metadata").is_dir())
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        return sorted(
            ident[-1]
            for ident in catalog.pyiceberg(settings.catalog, settings.warehouse).list_tables(settings.namespace)
        )
    except NoSuchNamespaceError:
        return []


def _hadoop_folder(settings: LakeSettings, catalog: JdbcCatalog | PropertiesCatalog | None) -> str | None:
    """The warehouse folder when the lake is a Hadoop catalog given by a Connection's properties, else None."""
    return catalog.hadoop_warehouse(settings.warehouse) if isinstance(catalog, PropertiesCatalog) else None
