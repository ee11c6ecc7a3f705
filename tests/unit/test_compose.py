"""docker-compose.yml's promises that make test-deploy (which runs the file's services) does not exercise by itself:
what a container would do differently from a local process (volumes, listeners, users), and that the files the
images are built from agree with the pins of requirements.txt."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
AIRFLOW = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-worker")


def test_airflow_runs_as_separate_services_with_celery_on_postgres_and_redis() -> None:
    for name in AIRFLOW:
        assert SERVICES[name]["build"]["dockerfile"] == "include/docker/airflow.Dockerfile", name
    assert [SERVICES[name]["command"][1] for name in AIRFLOW] == [
        "api-server",
        "scheduler",
        "dag-processor",
        "triggerer",
        "celery",
    ]
    assert SERVICES["airflow-worker"]["deploy"]["replicas"] == 2
    env = SERVICES["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor" and env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith(
        "postgresql"
    )
    assert "@airflow-db:5432/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] and env[
        "AIRFLOW__CELERY__BROKER_URL"
    ].startswith("redis://redis:6379")
    assert not any("standalone" in " ".join(spec.get("command") or []) for spec in SERVICES.values())


def test_every_connection_the_example_connector_names_exists() -> None:
    example = yaml.safe_load((ROOT / "plugins" / "walflow" / "config" / "examples" / "inventory.yaml").read_text())
    named = {value for key, value in example.items() if key.endswith(".conn.id")}
    named |= {"spark_default"}  # walflow.spark.conn.id's default: the example leaves it unset
    env = SERVICES["airflow-worker"]["environment"]
    assert {f"AIRFLOW_CONN_{name.upper()}" for name in named} <= set(env), sorted(named)


def test_secrets_come_from_one_env_file_shared_by_the_init_service_and_the_connections() -> None:
    dotenv = dict(
        line.split("=", 1) for line in (ROOT / ".env").read_text().splitlines() if line and not line.startswith("#")
    )
    text = (ROOT / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{(\w+)\}", text))
    assert used <= set(dotenv), used - set(dotenv)
    init = (ROOT / "include" / "docker" / "init" / "walflow-init.sh").read_text()
    # the roles get the passwords the Connections log in with
    for name in ("WALFLOW_PASSWORD", "WALFLOW_READER_PASSWORD"):
        assert f'"${name}"' in init and f"${{{name}}}@postgres:5432" in text
    assert "walflow sql roles | psql" in init and "-v publication=walflow_inventory" in init


def test_kafka_keeps_its_data_on_its_volume_and_listens_for_the_host() -> None:
    kafka = SERVICES["kafka"]
    env = kafka["environment"]
    assert f"kafkadata:{env['KAFKA_LOG_DIRS']}" in kafka["volumes"]
    external = re.search(r"EXTERNAL://localhost:(\d+)", env["KAFKA_ADVERTISED_LISTENERS"])
    assert external and f"{external.group(1)}:{external.group(1)}" in kafka["ports"]
    assert "INTERNAL://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]


def test_the_warehouse_is_writable_by_airflows_user_and_spark_workers() -> None:
    """The named volume is created root's: walflow-init (as root) hands it to Airflow's user, whom the Spark workers
    run as too, so the driver (in the Airflow worker) and the executors write the same files."""
    assert SERVICES["walflow-init"]["user"] == "0:0"
    assert SERVICES["airflow-worker"]["user"] == SERVICES["spark-worker"]["user"] == "50000:0"
    init = (ROOT / "include" / "docker" / "init" / "walflow-init.sh").read_text()
    assert re.search(r'chown -R -H "\$airflow_user:0" .*"\$WALFLOW_WAREHOUSE"', init)
    assert "warehouse:/opt/walflow/warehouse" in SERVICES["spark-worker"]["volumes"]


def test_the_build_context_leaves_out_local_state_and_secrets() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".walflow", ".git", ".env"} <= set(ignored)


def test_spark_services_run_what_the_lake_job_needs() -> None:
    """Master and workers come from the pyspark wheel on Airflow's Python with the decoder's libraries, pinned as in
    requirements.txt; the Airflow image has the JVM the driver needs
    and installs walflow's wheel with its lake extra."""
    for service in ("spark-master", "spark-worker"):
        assert SERVICES[service]["build"]["dockerfile"] == "include/docker/spark.Dockerfile"
    spark = (ROOT / "include" / "docker" / "spark.Dockerfile").read_text()
    assert "FROM python:3.11" in spark and "openjdk-17" in spark and "requirements-spark.txt" in spark
    pins = dict(
        line.split("==")
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    needed = dict(
        line.split("==")
        for line in (ROOT / "include" / "docker" / "requirements-spark.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert set(needed) == {"pyspark", "pyarrow", "orjson", "msgspec", "confluent-kafka"}
    assert all(pins[name] == version for name, version in needed.items()), (needed, pins)
    airflow = (ROOT / "include" / "docker" / "airflow.Dockerfile").read_text()
    assert (
        "openjdk-17" in airflow and "3.11" in airflow and "[lake]" in airflow and "requirements-deploy.txt" in airflow
    )
