"""Names unique to one test (connector names, topic prefixes, slots, roles), and the record of them that the
``database`` fixture (tests/conftest.py) uses to delete their topics when the test ends.

:func:`unique` is a plain function, for module-level helpers, and the ``unique`` fixture of tests/conftest.py for
tests; both record the name in :data:`NAMES`.
"""

from __future__ import annotations

import uuid

#: the names :func:`unique` gave since the current test's ``database`` fixture started, whose topics that fixture
#: deletes afterwards (:func:`delete_topics_of`)
NAMES: list[str] = []


def unique(prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    NAMES.append(name)
    return name
