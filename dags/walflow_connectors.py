"""One setup DAG and one stream DAG per connector YAML in include/connectors/ (or $WALFLOW_CONNECTORS_DIR)."""

from walflow.airflow.dag_factory import build_connector_dags

globals().update(build_connector_dags())
