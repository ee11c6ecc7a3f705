"""Spark in the tests: the settings of every Spark they start, the lake job run with spark-submit (killed at a
time or at a point of its own), and the lake job's modules run in the tests' own Spark session."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from tests.support.kafka import bootstrap
from tests.support.lake import lake_settings
from walflow.config.connector import ConnectorConfig

#: Spark settings of every Spark the tests start (in-process and spark-submit): a few shuffle partitions for small
#: batches instead of 200, and the JVM's quick compiler only with the serial collector. On this 2-core machine
#: the optimising compiler's threads compete with the tests for the CPU: a small apply takes about half as long
#: without them (measured: 3-5 s instead of 5-11 s per in-process apply, 13 s instead of 28 s for the first).
#: With the quick compiler alone the JVM reserves 48 MB for compiled code, which a session that runs many tests
#: fills: its sweeper thread then evicts code that is compiled again (perf over make test: 2% of the machine's CPU
#: in the sweepers of the two in-process sessions). 240 MB, the tiered default, keeps it: tests/integration/test_lake.py
#: took 88-94 CPU-s instead of 104-107.
TEST_SPARK_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m",
    # executors are JVMs of their own on a standalone cluster's workers (tests/e2e/test_cluster.py): short-lived too
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m",
}


def apply_command(config: ConnectorConfig, warehouse: str | None = None, *extra: str, **overrides: Any) -> list[str]:
    """The spark-submit command of the lake job for ``config`` (as the stream DAG's task builds it)."""
    from walflow.airflow.lake import APPLICATION, iceberg_runtime_jar, spark_conf

    settings = lake_settings(config, warehouse, **overrides)
    conf = {**spark_conf(config), **TEST_SPARK_CONF}
    conf[f"spark.sql.catalog.{settings.catalog}.warehouse"] = settings.warehouse
    command = ["spark-submit", "--master", "local[2]", "--jars", iceberg_runtime_jar() or ""]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(APPLICATION), "--settings", settings.model_dump_json(), "--bootstrap", bootstrap(), *extra]


def _job_env(**extra: str) -> dict[str, str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # the repository (tests/support/spark.py)
    return {**os.environ, "PYTHONPATH": f"{root / 'plugins'}:{root}", **extra}


def run_apply(
    config: ConnectorConfig, warehouse: str | None = None, *extra: str, kill_after: float | None = None
) -> subprocess.CompletedProcess[str] | None:
    """Run the lake job with spark-submit; with ``kill_after``, SIGKILL its whole process group after that many seconds.

    With ``kill_after`` it returns ``None`` when the kill happened, else the finished process (no output kept).
    """
    import signal

    command = apply_command(config, warehouse, *extra)
    if kill_after is None:
        return subprocess.run(command, env=_job_env(), capture_output=True, text=True, timeout=900)
    proc = subprocess.Popen(
        command, env=_job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        code = proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    return subprocess.CompletedProcess(command, code, "", "")


def run_apply_fault(
    config: ConnectorConfig, point: str, warehouse: str | None = None, *extra: str, **overrides: Any
) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run the lake job with the test-only hooks of ``tests/faults/apply_kill.py`` set to SIGKILL it (and its
    spark-submit JVM) at ``point`` (``name`` or ``name:n``). Returns the finished process and whether the kill
    happened at that point: the hook names the point in ``WALFLOW_APPLY_FAULT_FILE`` just before killing, and the
    job must not have exited normally."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="walflow-fault-") as folder:
        marker = Path(folder) / "fired"
        env = _job_env(
            WALFLOW_APPLY_HOOKS="tests.faults.apply_kill:KillAt",
            WALFLOW_APPLY_FAULT=point,
            WALFLOW_APPLY_FAULT_FILE=str(marker),
        )
        proc = subprocess.run(
            apply_command(config, warehouse, *extra, **overrides), env=env, capture_output=True, text=True, timeout=900
        )
        fired = marker.exists() and marker.read_text() == point.partition(":")[0] and proc.returncode != 0
    return proc, fired


# -- the lake job in the tests' own Spark session -------------------------------------------------------
def start_spark() -> Any:
    """A local[2] SparkSession with the Iceberg runtime (found as the stream DAG's task finds it) and the lake
    catalog on ``$WALFLOW_WAREHOUSE``: the lake job's modules run in it directly, without spark-submit."""
    import logging

    from pyspark.sql import SparkSession

    from tests.requires import unavailable
    from walflow.airflow.lake import iceberg_runtime_jar, postgresql_jdbc_jar
    from walflow.lake.settings import default_warehouse

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable(
            "Spark needs Java and there is no java on PATH (nor JAVA_HOME)",
            "make up installs Debian's openjdk-17-jre-headless",
        )
    jar = iceberg_runtime_jar()
    if jar is None:
        unavailable(
            "the Iceberg runtime jar (snowpark-connect-deps-iceberg) is not installed",
            "make venv installs it (requirements.txt)",
        )
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("walflow-tests")
        # PostgreSQL's JDBC driver too, for the lake's JDBC catalog
        .config("spark.jars", ",".join(j for j in (jar, postgresql_jdbc_jar()) if j))
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in {**TEST_SPARK_CONF, **catalog_conf("lake", default_warehouse())}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    logging.getLogger("py4j").setLevel(
        logging.WARNING
    )  # its connections log at interpreter exit, after pytest closed the streams
    return spark


def catalog_conf(catalog: str, warehouse: str) -> dict[str, str]:
    """A Hadoop catalog on ``warehouse``; without its table cache, since spark-submitted jobs write the same tables."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "hadoop",
        f"{prefix}.warehouse": warehouse,
        f"{prefix}.cache-enabled": "false",
    }


def lake_job(
    spark: Any, config: ConnectorConfig, warehouse: str | None = None, hooks: Any = None, **overrides: Any
) -> Any:
    """The lake job of ``config`` in the tests' Spark session; a ``warehouse`` other than the session's gets a
    catalog of its own."""
    import hashlib

    from walflow.lake.apply import LakeJob

    settings = lake_settings(config, warehouse, **overrides)
    if warehouse:
        catalog = "lake_" + hashlib.sha1(warehouse.encode()).hexdigest()[:8]
        for key, value in catalog_conf(catalog, warehouse).items():
            spark.conf.set(key, value)
        settings = settings.model_copy(update={"catalog": catalog})
    return LakeJob(spark, settings, {"bootstrap.servers": bootstrap()}, hooks)


def apply_lake(
    spark: Any, config: ConnectorConfig, warehouse: str | None = None, hooks: Any = None, **overrides: Any
) -> list[dict[str, Any]]:
    """One run of the lake job for ``config`` in the tests' Spark session; returns each table's result."""
    return lake_job(spark, config, warehouse, hooks, **overrides).run()
