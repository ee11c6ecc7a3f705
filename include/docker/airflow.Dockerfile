# Airflow with walflow installed from this repository as a wheel (with its "lake" extra), the Celery provider, Java 17
# (the lake job's driver runs in the Celery worker: client deploy mode) and psql (walflow-init runs roles.sql with it).
# The pins of requirements.txt hold the versions tested together; the driver's Python (3.11) matches the Spark image's.
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless postgresql-client \
    && rm -rf /var/lib/apt/lists/*
USER airflow
COPY --chown=airflow:root . /tmp/walflow
RUN pip install --no-cache-dir -c /tmp/walflow/requirements.txt -r /tmp/walflow/include/docker/requirements-deploy.txt \
        "/tmp/walflow[lake]" \
    && rm -rf /tmp/walflow
