"""A timetable for DAGs that exist to be triggered by hand and backfilled, never run on a schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from airflow.timetables.interval import CronDataIntervalTimetable

if TYPE_CHECKING:
    from pendulum.tz.timezone import FixedTimezone, Timezone


class BackfillOnlyTimetable(CronDataIntervalTimetable):
    """Cron data intervals for backfills (``airflow backfill create``), and no scheduled run, ever.

    The ad-hoc snapshot DAG needs data intervals so that each run of a backfill covers one interval, but a
    scheduled run of it would have no tables to snapshot. With this timetable the scheduler never creates one, so
    the DAG is safe to leave unpaused ("Unpause on trigger" in the UI), and its trigger form may require its
    parameters (Airflow insists on valid defaults only for DAGs that can be scheduled). Use it with
    ``catchup=False``: the scheduler asks for the next interval with the DAG's catchup, a backfill always with
    catchup on, which is how the two are told apart.

    Airflow must know the class to (de)serialize DAGs: :class:`walflow.airflow.plugin.WalflowPlugin` registers it.
    """

    #: no automatic runs: the scheduler skips the DAG, and required parameters without defaults are allowed
    can_be_scheduled = False

    def __init__(self, cron: str, timezone: str | Timezone | FixedTimezone = "UTC") -> None:
        super().__init__(cron, timezone)
        self.description = f"no scheduled runs: trigger it, or backfill it over intervals of {cron}"

    def next_dagrun_info(
        self, *, last_automated_data_interval: DataInterval | None, restriction: TimeRestriction
    ) -> DagRunInfo | None:
        if not restriction.catchup:
            return None  # the scheduler, for a catchup=False DAG: never a scheduled run
        return super().next_dagrun_info(
            last_automated_data_interval=last_automated_data_interval, restriction=restriction
        )

    @property
    def summary(self) -> str:
        return f"backfills only ({self._expression})"
