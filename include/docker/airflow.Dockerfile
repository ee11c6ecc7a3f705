# Airflow with Java 17 and walflow's pinned dependencies: the lake job's driver runs in the Airflow task (client
# deploy mode), so spark-submit needs a JVM here, and the driver's Python must match the executors' (3.11).
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
USER airflow
COPY requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt
