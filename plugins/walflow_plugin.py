"""Loads walflow's Airflow plugin (its timetable) from this plugins folder; see walflow/airflow/plugin.py."""

from walflow.airflow.plugin import WalflowPlugin  # noqa: F401
