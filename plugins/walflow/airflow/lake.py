"""The lake task of a stream DAG: the Spark job, submitted with the Spark provider's SparkSubmitOperator."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from walflow.config import ConnectorConfig
from walflow.lake.naming import table_name
from walflow.lake.settings import KAFKA_ENV, PROJECT, LakeSettings

if TYPE_CHECKING:
    from airflow.sdk import Context

APPLICATION = PROJECT / "include" / "spark" / "apply_changes.py"
#: Log4j settings of the job's driver: warnings and errors only, so the job's own error leads the task log
LOG4J = PROJECT / "include" / "spark" / "log4j2.properties"


class WalflowApplyOperator(SparkSubmitOperator):
    """The Spark provider's SparkSubmitOperator for the lake job, which says whether a failure can pass by itself.

    The job writes its outcome to a result file (client deploy mode: the driver runs beside the task). A walflow
    error that retrying cannot fix (a topic that lost its data, a record it cannot apply, a schema change it cannot
    make) fails the task at once, without the DAG's retries, with the job's message; any other failure (a broker or
    cluster away for a moment) keeps Airflow's retries. On success the job's summary is the task's XCom.
    """

    def execute(self, context: Context) -> Any:
        with tempfile.TemporaryDirectory(prefix="walflow-apply-") as folder:
            result = Path(folder) / "result.json"
            self.application_args = [*(self.application_args or []), "--result", str(result)]
            try:
                super().execute(context)
            except AirflowException as exc:
                outcome = _outcome(result)
                if outcome.get("error") and not outcome.get("retryable", False):
                    raise AirflowFailException(f"{outcome.get('type')}: {outcome['error']} [not retried: this needs a fix first]") from exc
                raise
            return _outcome(result) or None


def _outcome(path: Path) -> dict[str, Any]:
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def iceberg_runtime_jar() -> str | None:
    """The Iceberg Spark runtime shipped in the pinned wheel (see DESIGN.md), if installed."""
    try:
        import snowpark_connect_deps_iceberg
    except ImportError:
        return None
    jar = Path(snowpark_connect_deps_iceberg.__file__).parent / "jars" / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
    return str(jar) if jar.exists() else None


def spark_conf(config: ConnectorConfig) -> dict[str, str]:
    """Catalog settings: a Hadoop catalog on the warehouse folder unless ``walflow.lake.spark.conf`` says otherwise."""
    settings = LakeSettings.from_config(config)
    catalog = settings.catalog
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        f"spark.sql.catalog.{catalog}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{catalog}.type": "hadoop",
        f"spark.sql.catalog.{catalog}.warehouse": settings.warehouse,
        "spark.sql.session.timeZone": "UTC",
    }
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
        if len(parts) == 2 and all(part and re.fullmatch(r"[a-z0-9_]+", part) for part in parts) and table_name(*parts) == "__".join(parts):
            assets.append(Asset(f"iceberg://{catalog}/{namespace}/{table_name(*parts)}"))
        else:
            unnamed = True
    if unnamed:
        assets.append(Asset(f"iceberg://{catalog}/{namespace}"))
    return assets


def apply_task(config: ConnectorConfig, task_id: str = "apply_to_lake") -> WalflowApplyOperator:
    """The task running the apply job for this connector."""
    conf = spark_conf(config)
    jars = None if "spark.jars.packages" in conf else iceberg_runtime_jar()
    kafka = config.walflow_kafka_conn_id
    # one argument: the settings as JSON (no credentials); Kafka's settings come through the environment
    args = ["--settings", LakeSettings.from_config(config).argument()]
    return WalflowApplyOperator(
        task_id=task_id,
        application=str(APPLICATION),
        conn_id=config.walflow_spark_conn_id,
        jars=jars,
        conf=conf,
        name=f"walflow-apply-{config.name}",
        application_args=args,
        # librdkafka settings (TLS, SASL) of the Kafka Connection reach the job through its environment, not argv
        env_vars={
            "PYTHONPATH": str(PROJECT / "plugins"),
            KAFKA_ENV: "{{ conn['" + kafka + "'].extra }}",
            # the driver's JVM (client mode) logs warnings and errors only
            "SPARK_SUBMIT_OPTS": f"-Dlog4j2.configurationFile=file:{LOG4J}",
        },
        outlets=lake_assets(config),
    )
