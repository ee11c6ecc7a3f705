"""`walflow reset <connector>`: the recovery after lost topics starts the connector over, through its command line."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.privileges import as_connector
from tests.support import read_topic, setup, unique
from walflow.admin.cli import main
from walflow.config.files import load_config


def test_reset_drops_slot_and_state_so_the_next_setup_snapshots_again(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' FROM generate_series(1, 30) g")
    name = unique("reset")
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ntopic.prefix: {name}\nslot.name: {name}\npublication.name: {name}\nwalflow.lake.warehouse:"
        f" {tmp_path / 'lake'}\n"
    )
    (tmp_path / "lake" / name / "public__t" / "metadata").mkdir(parents=True)  # a lake table's folder
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    config = load_config(path)
    assert setup(config, database)["snapshot"]["ran"]
    assert main(["reset", name, "--lake", "--dsn", as_connector(database)]) == 0
    out = capsys.readouterr().out
    assert (
        "replication slot: dropped" in out and "snapshot" in out and "public__t" in out and f"run {name}__setup" in out
    )
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone() == (
            0,
        )
        keys = [k for (k,) in conn.execute("SELECT key FROM walflow_state WHERE connector = %s", (name,))]
    assert keys == ["owner"]  # its claim on slot and prefix stays
    assert not (tmp_path / "lake" / name).exists()
    # the next setup is a first setup: a new slot and a full snapshot
    report = setup(config, database)
    assert report["slot_created"] and report["snapshot"]["ran"] and report["snapshot"]["rows"] == 30
    assert len([r for r in read_topic(f"{name}.public.t") if r.op == "r"]) == 60


def test_reset_refuses_what_is_not_the_connectors_own(database: str, tmp_path: Path) -> None:
    """Reset drops nothing outside the connector: a lake namespace that is not one folder of the warehouse (it
    would remove the warehouse, its parent or an absolute path), a JDBC catalog (walflow cannot drop its tables
    itself), a slot of another kind or database, or a slot another connector claims."""
    from walflow.admin.reset import lake_folder, reset_connector
    from walflow.config.connector import parse_config
    from walflow.errors import ConfigError, DriftError, SlotError

    (tmp_path / "lake" / "keep").mkdir(parents=True)
    plain = parse_config({"name": "r", "topic.prefix": "r", "walflow.lake.warehouse": str(tmp_path / "lake")})
    for namespace in ("..", ".", "/", str(tmp_path / "elsewhere"), "a/b"):
        with pytest.raises(ConfigError, match="a lake namespace is one name"):  # refused when the YAML is read
            parse_config({"name": "r", "topic.prefix": "r", "walflow.lake.namespace": namespace})
        # and by reset itself, whatever built the configuration
        with pytest.raises(ConfigError, match="is not one folder of the warehouse"):
            lake_folder(plain.model_copy(update={"walflow_lake_namespace": namespace}))
    assert (tmp_path / "lake" / "keep").is_dir()
    jdbc = parse_config(
        {
            "name": "r",
            "topic.prefix": "r",
            "walflow.lake.warehouse": str(tmp_path / "lake"),
            "walflow.lake.catalog.conn.id": "catalog_pg",
        }
    )
    with pytest.raises(ConfigError, match="catalog type \"given by Connection 'catalog_pg'\""):
        lake_folder(jdbc)

    name = unique("notmine")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("SELECT pg_create_physical_replication_slot(%s)", (name,))
    try:
        config = parse_config({"name": name, "topic.prefix": name, "slot.name": name})
        with pytest.raises(SlotError, match="is a physical slot"):
            reset_connector(config, as_connector(database))
        with psycopg.connect(database) as conn:
            assert conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (name,)
            ).fetchone() == (1,)
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))

    owner = parse_config({"name": unique("owner"), "topic.prefix": unique("p"), "slot.name": unique("s")})
    setup(owner, database)
    intruder = parse_config({"name": unique("intruder"), "topic.prefix": unique("q"), "slot.name": owner.slot_name})
    with pytest.raises(DriftError, match="belongs to connector"):
        reset_connector(intruder, as_connector(database))
    with psycopg.connect(database) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (owner.slot_name,)
        ).fetchone() == (1,)


def test_reset_of_the_lake_waits_for_no_running_apply(database: str, tmp_path: Path) -> None:
    """The lake's tables are not removed under a running apply or maintenance (they hold the connector's lake lock):
    reset --lake is refused then, before anything is dropped."""
    from walflow.admin.reset import reset_connector
    from walflow.config.connector import parse_config
    from walflow.errors import ConcurrentRunError
    from walflow.source.locks import lake_lock

    name = unique("busy")
    config = parse_config(
        {"name": name, "topic.prefix": name, "slot.name": name, "walflow.lake.warehouse": str(tmp_path / "lake")}
    )
    setup(config, database)
    (tmp_path / "lake" / name / "public__t").mkdir(parents=True)
    with lake_lock(as_connector(database), name, 0) as held:
        assert held
        with pytest.raises(ConcurrentRunError, match="lake apply or maintenance"):
            reset_connector(config, as_connector(database), lake=True)
    assert (tmp_path / "lake" / name / "public__t").is_dir()
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone() == (
            1,
        )
    assert reset_connector(config, as_connector(database), lake=True).slot_dropped  # once the lock is free
    assert not (tmp_path / "lake" / name).exists()
