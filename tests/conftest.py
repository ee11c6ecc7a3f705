"""Session fixtures: the tests' own embedded services, started by `make test` (see .walflow/test/env.sh)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import privileges, support
from tests.requires import unavailable


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
    least-privilege connector role (include/sql/roles.sql), which the connector under test runs as:
    ``tests.privileges.as_connector(database)`` is its DSN. Slots, the database and the role are dropped afterwards,
    and the topics of the connectors the test named with :func:`tests.support.unique`."""
    support.NAMES.clear()
    name = support.create_database(request.node.name[:20].lower().replace("[", "_").replace("]", "").replace("-", "_"))
    try:
        privileges.create_database_role(support.pg_dsn(name))
        yield support.pg_dsn(name)
    finally:
        support.drop_database(name)
        privileges.drop_database_role(name)
        support.delete_topics_of(list(support.NAMES))
        support.NAMES.clear()
