"""The connector files that walflow_connectors.py leaves out, shown as this DAG file's import error in Airflow.

walflow_connectors.py builds the DAGs of every valid connector. A connector file that cannot be loaded (a typo in a
value, YAML that does not parse, a slot or topic prefix another file claims) is left out there and raised here,
naming the file, the key and the fix: Airflow lists it among its import errors (the UI's banner, ``airflow dags
list-import-errors``), while the other connectors keep streaming. This file holds no DAG, so an error here never
marks theirs stale.
"""

from walflow.airflow.dag_factory import check_connector_files

check_connector_files()
