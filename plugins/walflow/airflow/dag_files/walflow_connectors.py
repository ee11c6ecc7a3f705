"""The DAGs of every valid connector YAML in $WALFLOW_CONNECTORS_DIR (else include/connectors/ beside the DAGs
folder): setup, stream, and where configured the lake's maintenance and the snapshot form. A file that cannot be
loaded is left out here and shown by walflow_connector_errors.py as an import error, so that it never takes the other
connectors' DAGs with it.
"""

from walflow.airflow.dag_factory import build_connector_dags

globals().update(build_connector_dags())
