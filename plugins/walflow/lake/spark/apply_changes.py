"""walflow's Spark job: apply a connector's Debezium change events from Kafka to Iceberg tables, exactly once.

Submitted by the stream DAG's SparkSubmitOperator (``walflow.airflow.lake.apply_task``):

    spark-submit --jars iceberg-spark-runtime-3.5_2.12-1.10.2.jar --conf spark.sql.catalog.lake=... \\
        walflow/lake/spark/apply_changes.py --settings '<LakeSettings JSON>'

with ``WALFLOW_KAFKA_CONFIG`` (the Kafka Connection's extras) in its environment and the folder holding the installed
walflow on its ``PYTHONPATH``. This file is package data, run from the installed package; the job itself is the
package ``walflow.lake`` (docs/lake.md).
"""

from __future__ import annotations

import sys

from walflow.lake.job import main

if __name__ == "__main__":
    sys.exit(main())
