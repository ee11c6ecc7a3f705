"""walflow's Airflow plugin: registers :class:`~walflow.airflow.timetables.BackfillOnlyTimetable`, which Airflow
must know to serialize and schedule the DAGs that use it (the ad-hoc snapshot DAG).

Airflow loads it through the ``airflow.plugins`` entry point of the installed package (``pyproject.toml``): no file
in Airflow's plugins folder is needed, and none may load it too (Airflow would report the second as a plugin import
error, "already registered").
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from walflow.airflow.timetables import BackfillOnlyTimetable


class WalflowPlugin(AirflowPlugin):
    name = "walflow"
    timetables = [BackfillOnlyTimetable]
