"""The walflow page of Airflow's UI (``walflow.html``): served by :mod:`walflow.airflow.ui`, it reads the status route
and renders it in the browser, every value as text."""
