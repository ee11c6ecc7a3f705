"""Session fixtures: the tests' own embedded services, started by `make test` (see .walflow/test/env.sh); and the
markers that say what each test needs, which make test's lanes select by."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import privileges, support
from tests.requires import unavailable
from tests.support import names

TESTS = Path(__file__).resolve().parent
#: the folders whose every test needs the same thing, and the marker that says it (pyproject.toml describes each);
#: a module elsewhere says what its tests need in its ``pytestmark``
FOLDER_MARKERS = {"unit": "unit", "e2e": "airflow", "compat": "compat", "deploy": "deploy"}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with what it needs, which make test's lanes select by (the Makefile): its folder's marker, and
    ``spark`` when it uses the tests' Spark session (the ``spark`` fixture), so that no test starts one in a lane
    that has none."""
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else None
        if folder in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[folder])
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker("spark")


def _need(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        unavailable(f"{var} is not set", "run the tests through `make test`, which starts the services")
    return value


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return _need("WALFLOW_PG_DSN")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return _need("WALFLOW_KAFKA_BOOTSTRAP")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local[2] SparkSession with Iceberg for the whole session (started by the first test that asks), in
    which tests drive the lake job's modules directly."""
    session = support.start_spark()
    yield session
    session.stop()


@pytest.fixture()
def catalog_database(pg_dsn: str) -> Iterator[str]:
    """A database of its own for an Iceberg JDBC catalog (the catalog looks for its tables in every schema of its
    database); dropped afterwards."""
    name = support.create_database("lakecat")
    try:
        yield name
    finally:
        support.drop_database(name)


@pytest.fixture()
def database(pg_dsn: str, kafka_bootstrap: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database for one test; returns its superuser DSN, for the test's own SQL. The database has a
    least-privilege connector role (walflow/source/sql/roles.sql), which the connector under test runs as:
    ``tests.privileges.as_connector(database)`` is its DSN. Slots, the database and the role are dropped afterwards,
    and the topics of the connectors the test named with :func:`tests.support.unique` (or the ``unique`` fixture)."""
    names.NAMES.clear()
    name = support.create_database(request.node.name[:20].lower().replace("[", "_").replace("]", "").replace("-", "_"))
    try:
        privileges.create_database_role(support.pg_dsn(name))
        yield support.pg_dsn(name)
    finally:
        support.drop_database(name)
        privileges.drop_database_role(name)
        support.delete_topics_of(list(names.NAMES))
        names.NAMES.clear()


@pytest.fixture()
def unique() -> Callable[[str], str]:
    """:func:`tests.support.unique` for a test: ``unique("shop")`` is ``shop_`` and a random tag, a name no other test
    uses (connector, topic prefix, slot, role). The name is recorded like the plain function's, so with the
    ``database`` fixture the topics named after it are deleted when the test ends. Module-level helpers that need a
    name call the plain function (``from tests.support import unique``)."""
    return names.unique
