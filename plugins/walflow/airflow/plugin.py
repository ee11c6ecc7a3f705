"""walflow's Airflow plugin: registers :class:`~walflow.airflow.timetables.BackfillOnlyTimetable`, which Airflow
must know to serialize and schedule the DAGs that use it (the ad-hoc snapshot DAG), and the walflow page of the UI
(:mod:`walflow.airflow.ui`: routes on the API server, and its place in the UI's navigation).

Airflow loads it through the ``airflow.plugins`` entry point of the installed package (``pyproject.toml``): no file
in Airflow's plugins folder is needed, and none may load it too (Airflow would report the second as a plugin import
error, "already registered").
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from walflow.airflow.timetables import BackfillOnlyTimetable
from walflow.airflow.ui import app


class WalflowPlugin(AirflowPlugin):
    name = "walflow"

    def __init__(self) -> None:
        super().__init__()
        # each instance's own list (Airflow reads the plugins it instantiates), not one list shared through the class
        self.timetables = [BackfillOnlyTimetable]
        # the walflow page: its routes on Airflow's API server, and an entry in the UI's navigation that shows it
        self.fastapi_apps = [{"app": app, "url_prefix": "/walflow", "name": "walflow"}]
        self.external_views = [
            {
                "name": "walflow",
                "href": "/walflow/",
                "destination": "nav",
                "url_route": "walflow",
                "nav_top_level": True,
            }
        ]
