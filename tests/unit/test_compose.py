"""docker-compose.yml cannot run here (no Docker engine): check its structure instead."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())


def test_services_present() -> None:
    assert {"postgres", "kafka", "spark-master", "spark-worker", "airflow"} <= set(COMPOSE["services"])


def test_postgres_has_logical_wal() -> None:
    command = " ".join(COMPOSE["services"]["postgres"]["command"])
    assert "wal_level=logical" in command and "max_replication_slots" in command


def test_kafka_runs_in_kraft_mode() -> None:
    env = COMPOSE["services"]["kafka"]["environment"]
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and "broker" in env["KAFKA_PROCESS_ROLES"]
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env and env["KAFKA_CONTROLLER_QUORUM_VOTERS"]


def test_airflow_mounts_repo_and_names_connections() -> None:
    airflow = COMPOSE["services"]["airflow"]
    assert any(v.startswith("./:") for v in airflow["volumes"])
    env = airflow["environment"]
    for conn in ("AIRFLOW_CONN_POSTGRES_DEFAULT", "AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT"):
        assert conn in env
    assert env["AIRFLOW__CORE__DAGS_FOLDER"].endswith("/dags")
    assert set(airflow["depends_on"]) >= {"postgres", "kafka"}


def test_spark_worker_joins_master() -> None:
    command = COMPOSE["services"]["spark-worker"]["command"]
    assert "spark://spark-master:7077" in command


def test_spark_services_run_what_the_lake_job_needs() -> None:
    """Master and workers come from the pyspark wheel on Airflow's Python with the decoder's libraries, pinned as in
    requirements.txt; the Airflow image has the JVM the driver needs."""
    root = Path(__file__).resolve().parents[2]
    for service in ("spark-master", "spark-worker"):
        assert COMPOSE["services"][service]["build"]["dockerfile"] == "include/docker/spark.Dockerfile"
    spark = (root / "include" / "docker" / "spark.Dockerfile").read_text()
    assert "FROM python:3.11" in spark and "openjdk-17" in spark and "requirements-spark.txt" in spark
    pins = dict(line.split("==") for line in (root / "requirements.txt").read_text().splitlines() if "==" in line and not line.startswith("#"))
    needed = dict(line.split("==") for line in (root / "include" / "docker" / "requirements-spark.txt").read_text().splitlines() if "==" in line and not line.startswith("#"))
    assert set(needed) == {"pyspark", "pyarrow", "orjson", "msgspec", "confluent-kafka"}
    assert all(pins[name] == version for name, version in needed.items()), (needed, pins)
    airflow = COMPOSE["services"]["airflow"]
    assert airflow["build"]["dockerfile"] == "include/docker/airflow.Dockerfile"
    assert "openjdk-17" in (root / "include" / "docker" / "airflow.Dockerfile").read_text()
    assert "3.11" in (root / "include" / "docker" / "airflow.Dockerfile").read_text()
