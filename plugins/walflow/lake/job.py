"""The lake jobs' entry points: ``walflow/lake/spark/apply_changes.py`` calls :func:`main` under spark-submit,
``walflow/lake/spark/maintain_lake.py`` :func:`maintain_main`.

    spark-submit --jars iceberg-spark-runtime-3.5_2.12-1.10.2.jar --conf spark.sql.catalog.lake=... \\
        walflow/lake/spark/apply_changes.py --settings '<LakeSettings JSON>'

The Kafka client settings (``bootstrap.servers``, TLS, SASL) come from ``$WALFLOW_KAFKA_CONFIG`` (JSON), the Airflow
task's environment, never from the command line, as do Spark settings holding secrets (``$WALFLOW_LAKE_CATALOG_CONF``:
the JDBC catalog's password). ``$WALFLOW_APPLY_HOOKS`` may name hooks to call at each step (:mod:`walflow.lake.hooks`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession

import walflow
from walflow.errors import WalflowError
from walflow.lake.apply import LakeJob
from walflow.lake.hooks import load_hooks
from walflow.lake.maintain import LakeMaintenance
from walflow.lake.settings import CATALOG_ENV, KAFKA_ENV, LakeSettings

log = logging.getLogger("walflow.apply")
#: the exit status of a run stopped by a walflow error (its JSON is in the --result file)
ERROR_EXIT = 3
#: the modules the executors import (the decoder and what it needs): pure Python, no Spark, no pydantic
EXECUTOR_MODULES = (
    "__init__.py",
    "errors.py",
    "names.py",
    "kafka.py",
    "records/__init__.py",
    "records/decimals.py",
    "records/temporal.py",
    "records/facts.py",
    "lake/__init__.py",
    "lake/columns.py",
    "lake/decoder.py",
    "lake/evolution.py",
    "lake/loose.py",
    "lake/naming.py",
    "lake/positions.py",
    "lake/reader.py",
    "lake/types.py",
    "lake/values.py",
)


def kafka_settings(bootstrap: str | None = None) -> dict[str, Any]:
    """librdkafka settings from ``$WALFLOW_KAFKA_CONFIG`` (the Kafka Connection's extras), ``bootstrap`` over them."""
    text = os.environ.get(KAFKA_ENV, "").strip()
    settings = orjson.loads(text) if text else {}
    if bootstrap:
        settings["bootstrap.servers"] = bootstrap
    if not settings.get("bootstrap.servers"):
        raise SystemExit(
            f"no Kafka bootstrap servers: set {KAFKA_ENV} to the Kafka Connection's extras, or pass --bootstrap"
        )
    return settings


def executor_archive(folder: Path) -> Path:
    """A zip of the modules the executors import, in ``folder``."""
    package = Path(walflow.__file__).parent
    archive = folder / "walflow_lake.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for module in EXECUTOR_MODULES:
            zf.write(package / module, f"walflow/{module}")
    return archive


def ship_walflow(spark: SparkSession) -> None:
    """Make the decoder importable on the executors of any cluster.

    On a cluster the executors do not have this repository, so the modules they import are zipped on the driver
    and added with ``addPyFile``.
    """
    spark.sparkContext.addPyFile(str(executor_archive(Path(tempfile.mkdtemp(prefix="walflow-pyfiles-")))))


def catalog_secrets(spark: SparkSession) -> None:
    """Spark settings that hold secrets (the JDBC catalog's password) from ``$WALFLOW_LAKE_CATALOG_CONF`` (JSON),
    set before the catalog is first used: they never appear on spark-submit's command line."""
    text = os.environ.get(CATALOG_ENV, "").strip()
    for key, value in (orjson.loads(text) if text else {}).items():
        spark.conf.set(key, str(value))


def main(argv: list[str] | None = None) -> int:
    """``walflow/lake/spark/apply_changes.py``: apply the connector's topics to its lake tables."""
    return _run("apply", argv)


def maintain_main(argv: list[str] | None = None) -> int:
    """``walflow/lake/spark/maintain_lake.py``: compact, rewrite deletes, expire and clean the connector's lake
    tables."""
    return _run("maintain", argv)


def _run(task: str, argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(description=f"{task} a walflow connector's Iceberg tables")
    parser.add_argument("--settings", required=True, help="the connector's LakeSettings as JSON")
    if task == "apply":
        parser.add_argument(
            "--bootstrap", default=None, help="Kafka bootstrap servers, over those of $WALFLOW_KAFKA_CONFIG"
        )
        parser.add_argument(
            "--topics", default="", help="comma-separated topics (default: every table topic of the connector)"
        )
    parser.add_argument("--result", default="", help="write the JSON summary to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    settings = LakeSettings.from_argument(args.settings)
    kafka = kafka_settings(args.bootstrap) if task == "apply" else {}
    # the application's name is spark-submit's --name (the Airflow task gives walflow-<task>-<connector>)
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    catalog_secrets(spark)
    master = spark.sparkContext.master or ""  # set on every started context (its type allows None)
    if task == "apply" and not master.startswith("local"):
        ship_walflow(spark)
    started = time.monotonic()
    try:
        if task == "apply":
            only = [t.strip() for t in args.topics.split(",") if t.strip()] or None
            results = LakeJob(spark, settings, kafka, load_hooks()).run(only)
        else:
            results = LakeMaintenance(spark, settings).run()
    except WalflowError as exc:
        # the cause and the fix, without a Python or JVM stack trace in front of them; the task reads the result
        # file to know whether running again can help (a LakeError cannot: it needs a person)
        log.error("the lake job stopped: %s", exc)
        if args.result:
            # the topics applied before the failure (LakeJob.run goes on past a failed topic) are reported too
            failed = {
                "error": str(exc),
                "type": type(exc).__name__,
                "retryable": exc.retryable,
                "tables": getattr(exc, "results", []),
            }
            Path(args.result).write_text(orjson.dumps(failed, default=str, option=orjson.OPT_NON_STR_KEYS).decode())
        spark.stop()
        return ERROR_EXIT
    except Exception as exc:
        # a failure walflow does not foresee (Spark, the catalog, the storage, an executor): one line that says
        # what failed, then the whole trace; running again may help (a commit conflict, a storage hiccup), so the
        # task is left to its retries, unless the failure is one that the same run meets again every time
        cause = describe_failure(exc)
        retryable = failure_is_transient(exc)
        log.exception("the lake job stopped on an unexpected error (%s task; the trace follows): %s", task, cause)
        if args.result:
            if not retryable:
                cause += (
                    " (the same run meets this again every time, so the task is not retried: check that the namespace "
                    "and tables it names exist in the catalog the job's walflow.lake.catalog settings reach, with "
                    "rights to them; if they do, report it as a walflow bug with this log)"
                )
            Path(args.result).write_text(
                orjson.dumps({"error": cause, "type": type(exc).__name__, "retryable": retryable}).decode()
            )
        spark.stop()
        return ERROR_EXIT
    summary = {"tables": results, "seconds": round(time.monotonic() - started, 2)}
    text = orjson.dumps(summary, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    print(f"WALFLOW_{task.upper()}_SUMMARY {text}")
    if args.result:
        Path(args.result).write_text(text)
    spark.stop()
    return 0


#: Java exceptions of Spark and Iceberg that say what a statement names does not fit the catalog or the table: running
#: the same job again meets them again (unlike a lost executor, a storage hiccup or a commit conflict)
DETERMINISTIC_FAILURES = (
    "org.apache.spark.sql.AnalysisException",
    "org.apache.iceberg.exceptions.NoSuchNamespaceException",
    "org.apache.iceberg.exceptions.NoSuchTableException",
    "org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException",
    "org.apache.spark.sql.catalyst.analysis.NoSuchTableException",
    "org.apache.spark.sql.catalyst.parser.ParseException",
)


def failure_is_transient(exc: BaseException) -> bool:
    """Whether running the job again may get past ``exc``, a failure walflow did not foresee: not for Spark's analysis
    and parse errors or a catalog's missing namespace or table (the same statements meet them again), yes for the
    rest (executors, storage, the network, commit conflicts)."""
    if type(exc).__name__ in ("AnalysisException", "ParseException"):
        return False
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else ""
    return not any(text.startswith(name) for name in DETERMINISTIC_FAILURES)


def describe_failure(exc: BaseException, limit: int = 1000) -> str:
    """One line naming an unforeseen failure: the Java exception of a Py4J error (not py4j's "An error occurred while
    calling o123.sql"), the last line of a Python worker's traceback (the exception an executor raised), else the
    message's first line."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    line = lines[-1] if any(line.startswith("Traceback (most recent call last)") for line in lines) else lines[0]
    return f"{type(exc).__name__}: {line[:limit]}"


if __name__ == "__main__":
    sys.exit(main())
