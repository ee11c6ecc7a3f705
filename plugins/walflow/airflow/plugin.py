"""walflow's Airflow plugin: registers :class:`~walflow.airflow.timetables.BackfillOnlyTimetable`, which Airflow
must know to serialize and schedule the DAGs that use it (the ad-hoc snapshot DAG).

``plugins/walflow_plugin.py`` loads it from this repository's plugins folder. A deployment that installs walflow
as a package instead puts the same one line, ``from walflow.airflow.plugin import WalflowPlugin``, in a file of its
own plugins folder.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from walflow.airflow.timetables import BackfillOnlyTimetable


class WalflowPlugin(AirflowPlugin):
    name = "walflow"
    timetables = [BackfillOnlyTimetable]
