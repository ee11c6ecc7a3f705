"""The schema topic's facts as both sides read them: the writer (:mod:`walflow.capture.schema_facts`) and the lake
job, whose executors import this module (plain Python only).
"""

from __future__ import annotations

from typing import Any

import orjson


def field_type(schema: dict[str, Any]) -> str:
    """A field's type as its events' schema says it, without its default and name: the form of a fact's ``types``
    (written by :mod:`walflow.capture.schema_facts`, compared by :mod:`walflow.lake.evolution`)."""
    return orjson.dumps({k: v for k, v in schema.items() if k not in ("default", "field")}, option=orjson.OPT_SORT_KEYS).decode()


#: the version of the facts' format: the ``format`` field of every fact; the lake reads only the facts of its version
FORMAT = 1
#: the kind of a start fact: where a lake table with no offsets of its own starts reading its topic
#: (:func:`walflow.capture.schema_facts.start_record`)
START_KIND = "start"
