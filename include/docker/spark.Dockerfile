# The Spark master and workers of docker-compose.yml: Spark from the pyspark wheel on the same Python as Airflow's
# image (PySpark needs the same minor version on the driver and the executors), Java 17, and the libraries the lake
# job's decoder imports on the executors. The Iceberg runtime and JDBC jars and walflow's own modules are not baked
# in: spark-submit ships them with each job (--jars, and the job's addPyFile of walflow's executor modules).
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
COPY include/docker/requirements-spark.txt /tmp/requirements-spark.txt
RUN pip install --no-cache-dir -r /tmp/requirements-spark.txt
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=python3
ENV PATH=$SPARK_HOME/bin:$PATH
# the workers run as Airflow's user id (docker-compose.yml), which owns the warehouse; Hadoop's login needs the id to
# have an account
RUN useradd --uid 50000 --gid 0 --create-home spark
