"""walflow's lake maintenance job: compact a connector's Iceberg tables, rewrite their delete files, expire old
snapshots and remove orphan files, keeping what exactly once needs (``walflow.lake.maintain``).

Submitted by the ``<name>__maintain`` DAG's SparkSubmitOperator (``walflow.airflow.lake.maintain_task``):

    spark-submit --jars iceberg-spark-runtime-3.5_2.12-1.10.2.jar --conf spark.sql.catalog.lake=... \\
        walflow/lake/spark/maintain_lake.py --settings '<LakeSettings JSON>'
"""

from __future__ import annotations

import sys

from walflow.lake.job import maintain_main

if __name__ == "__main__":
    sys.exit(maintain_main())
