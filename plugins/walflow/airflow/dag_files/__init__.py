"""walflow's DAG files, shipped as package data for Airflow's DAGs folder (``walflow dag-files <folder>`` copies
them there): ``walflow_connectors.py`` builds every valid connector's DAGs, ``walflow_connector_errors.py`` shows the
connector files left out as its import error. Airflow reads them from the DAGs folder, never from here."""
