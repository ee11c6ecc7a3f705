"""Connector configuration: Debezium names and defaults, and errors that name key, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from walflow.config.connector import parse_config
from walflow.config.files import load_all, load_config, resolve
from walflow.errors import ConfigError

BASE = {"name": "inv", "topic.prefix": "inv"}


def test_debezium_defaults() -> None:
    config = parse_config(BASE)
    assert config.get("slot.name") == "debezium"
    assert config.get("publication.name") == "dbz_publication"
    assert config.get("publication.autocreate.mode") == "all_tables"
    assert config.get("snapshot.mode") == "initial"
    assert config.get("decimal.handling.mode") == "precise"
    assert config.get("time.precision.mode") == "adaptive"
    assert config.get("tombstones.on.delete") is True
    assert config.get("provide.transaction.metadata") is False
    assert config.get("toasted.value.placeholder") == "__debezium_unavailable_value"
    assert config.get("walflow.postgres.conn.id") == "postgres_default"
    assert config.get("walflow.kafka.conn.id") == "kafka_default"
    assert config.get("incremental.snapshot.chunk.size") == 1024
    assert config.transaction_topic == "inv.transaction"


def test_old_alias_for_topic_prefix() -> None:
    config = parse_config({"name": "inv", "database.server.name": "legacy"})
    assert config.topic_prefix == "legacy"
    assert config.get("database.server.name") == "legacy"


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"'slot\.nmae' is not a known key"):
        parse_config({**BASE, "slot.nmae": "x"})


def test_wrong_type_names_key_and_value() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "incremental.snapshot.chunk.size": "lots"})
    assert "'incremental.snapshot.chunk.size' = 'lots'" in str(err.value)


def test_invalid_enum_lists_allowed_values() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "snapshot.mode": "sometimes"})
    message = str(err.value)
    assert "'snapshot.mode' = 'sometimes'" in message
    for allowed in ("initial", "always", "never", "initial_only", "when_needed", "no_data"):
        assert allowed in message


def test_include_and_exclude_conflict() -> None:
    with pytest.raises(ConfigError, match=r"'table\.include\.list' and 'table\.exclude\.list' cannot both be set"):
        parse_config({**BASE, "table.include.list": "public.a", "table.exclude.list": "public.b"})


def test_bad_regex_is_reported() -> None:
    with pytest.raises(
        ConfigError, match=r"'table\.include\.list'.*not a valid Java regular expression \(unclosed group"
    ):
        parse_config({**BASE, "table.include.list": "public.(a"})


def test_secrets_do_not_belong_in_yaml() -> None:
    with pytest.raises(ConfigError, match=r"database\.password.*Airflow Connection"):
        parse_config({**BASE, "database.password": "hunter2"})


def test_required_keys() -> None:
    with pytest.raises(ConfigError, match=r"'topic\.prefix' is required"):
        parse_config({"name": "inv"})


def test_lists_accept_strings_and_sequences() -> None:
    a = parse_config({**BASE, "table.include.list": "public.a, public.b"})
    b = parse_config({**BASE, "table.include.list": ["public.a", "public.b"]})
    assert a.table_include_list == b.table_include_list == ["public.a", "public.b"]


def test_skipped_operations() -> None:
    assert parse_config(BASE).skipped_operations == ["t"]
    assert parse_config({**BASE, "skipped.operations": "none"}).skipped_operations == []
    with pytest.raises(ConfigError, match="unknown operation"):
        parse_config({**BASE, "skipped.operations": "x"})


def test_slot_name_rules() -> None:
    with pytest.raises(ConfigError, match=r"'slot\.name' = 'Bad-Slot'"):
        parse_config({**BASE, "slot.name": "Bad-Slot"})


def test_patterned_keys() -> None:
    config = parse_config(
        {**BASE, "column.truncate.to.20.chars": "public.a.c", "column.mask.with.5.chars": "public.a.d"}
    )
    assert config.column_truncate == {20: ["public.a.c"]}
    assert config.column_mask == {5: ["public.a.d"]}


def test_yaml_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.yaml").write_text("name: a\ntopic.prefix: a\nslot.name: a\n")
    (tmp_path / "b.yml").write_text("name: b\ntopic.prefix: b\n")
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    assert [c.name for c in load_all()] == ["a", "b"]
    assert resolve("a", {"slot.name": "other"}).slot_name == "other"
    with pytest.raises(ConfigError, match="no connector named 'zzz'"):
        resolve("zzz")


def test_invalid_yaml_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_each_connector_file_loads_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo, YAML that does not parse, and two files claiming one slot: the valid connector loads, each broken file
    has its own error, both files of the conflict are refused by name; a broken file never stops another connector's
    tasks from finding theirs."""
    from walflow.config.files import load_each

    (tmp_path / "good.yaml").write_text("name: good\ntopic.prefix: good\nslot.name: good\n")
    (tmp_path / "typo.yaml").write_text("name: typo\ntopic.prefix: typo\nslot.name: typo\nsnapshot.mode: bogus\n")
    (tmp_path / "unclosed.yml").write_text("name: [unclosed\n")
    for name in ("twin_a", "twin_b"):
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ntopic.prefix: {name}\nslot.name: shared\n")
    configs, errors = load_each(tmp_path)
    assert [c.name for c in configs] == ["good"]
    assert [p.name for p in errors] == ["twin_a.yaml", "twin_b.yaml", "typo.yaml", "unclosed.yml"]
    assert "'snapshot.mode' = 'bogus'" in str(errors[tmp_path / "typo.yaml"]) and "'initial'" in str(
        errors[tmp_path / "typo.yaml"]
    )
    assert "not valid YAML" in str(errors[tmp_path / "unclosed.yml"])
    for twin in ("twin_a.yaml", "twin_b.yaml"):
        message = str(errors[tmp_path / twin])
        assert (
            "slot 'shared'" in message
            and "twin_a.yaml and " in message
            and "twin_b.yaml; each connector needs its own" in message
        )
    with pytest.raises(ConfigError, match=r"slot 'shared' .* is used by both"):
        load_all(tmp_path)  # all or nothing, for the callers that need every file
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    assert resolve("good").name == "good"
    with pytest.raises(ConfigError, match=r"no connector named 'zzz' .*unclosed\.yml cannot be read"):
        resolve("zzz")


def test_shipped_connectors_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "include" / "connectors"
    assert [c.name for c in load_all(root)] == ["inventory"]


def test_unavailable_value_placeholder_is_the_newer_name_of_the_toast_placeholder() -> None:
    config = parse_config({**BASE, "unavailable.value.placeholder": "__gone"})
    assert config.toasted_value_placeholder == "__gone"
    assert config.get("unavailable.value.placeholder") == config.get("toasted.value.placeholder") == "__gone"
    for pair in (
        {"unavailable.value.placeholder": "a", "toasted.value.placeholder": "b"},
        {"toasted.value.placeholder": "b", "unavailable.value.placeholder": "a"},
    ):
        with pytest.raises(ConfigError, match="name the same setting"):
            parse_config({**BASE, **pair})


def test_truncate_handling_mode_is_folded_into_skipped_operations() -> None:
    assert parse_config({**BASE, "truncate.handling.mode": "include"}).skipped_operations == []
    assert parse_config({**BASE, "truncate.handling.mode": "skip"}).skipped_operations == ["t"]
    agreeing = parse_config({**BASE, "truncate.handling.mode": "include", "skipped.operations": "d"})
    assert agreeing.skipped_operations == ["d"]
    with pytest.raises(ConfigError, match=r"'truncate\.handling\.mode' = 'include' contradicts 'skipped\.operations'"):
        parse_config({**BASE, "truncate.handling.mode": "include", "skipped.operations": "t,d"})
    with pytest.raises(
        ConfigError, match=r"'truncate\.handling\.mode' = 'sometimes': allowed values are 'skip' and 'include'"
    ):
        parse_config({**BASE, "truncate.handling.mode": "sometimes"})


def test_values_written_as_kafka_connect_and_yaml_write_them(tmp_path: Path) -> None:
    """A configuration copied from Kafka Connect (every value a string) or written in YAML without quotes (numbers
    and booleans where walflow keeps strings) means the same as the canonical form."""
    config = parse_config({**BASE, "tasks.max": "1", "snapshot.max.threads": "2", "tombstones.on.delete": "false"})
    assert (config.tasks_max, config.snapshot_max_threads, config.tombstones_on_delete) == (1, 2, False)
    path = tmp_path / "c.yaml"
    path.write_text(
        "name: c\ntopic.prefix: c\nwalflow.event.format: 3.6\n"
        "walflow.lake.spark.conf:\n  spark.executor.instances: 2\n  spark.sql.adaptive.enabled: true\n "
        " spark.executor.memory: 2g\n"
    )
    config = load_config(path)
    assert config.walflow_event_format == "3.6"
    assert config.walflow_lake_spark_conf == {
        "spark.executor.instances": "2",
        "spark.sql.adaptive.enabled": "true",
        "spark.executor.memory": "2g",
    }


def test_more_than_one_task_is_refused_with_the_reason() -> None:
    for value in ("2", 2, True):
        with pytest.raises(ConfigError) as err:
            parse_config({**BASE, "tasks.max": value})
        assert f"'tasks.max' = {value!r}: walflow runs one task per connector" in str(err.value)
    with pytest.raises(ConfigError, match=r"'walflow.event.format' = 2.6: Input should be '3.6' or 'pre-2.6'"):
        parse_config({**BASE, "walflow.event.format": 2.6})


def test_the_readme_lists_every_debezium_property_as_the_model_treats_it() -> None:
    from pathlib import Path

    from walflow.config.properties import DEBEZIUM_PROPERTIES, UNKNOWN, markdown_table, status

    unknown = [key for key in DEBEZIUM_PROPERTIES if status(key)[0] == UNKNOWN]
    assert not unknown, (
        f"Debezium documents these keys and walflow neither honours, accepts nor refuses them: {unknown}"
    )
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("checks it -->\n") + len("checks it -->\n")
    assert readme[start : readme.index("\n<!-- end of generated table -->")] == markdown_table(), (
        "README.md's table of Debezium's properties differs from walflow.config.properties: paste markdown_table()'s"
        " output"
    )


@pytest.mark.parametrize("key", ["max.queue.size", "poll.interval.ms", "schema.refresh.mode"])
def test_keys_without_effect_are_accepted(key: str) -> None:
    parse_config({"name": "c", "topic.prefix": "p", key: "1"})


def test_values_walflow_cannot_honour_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="channel\\(s\\) \\['jmx'\\] are not supported yet"):
        parse_config({"name": "c", "topic.prefix": "p", "signal.enabled.channels": "source,jmx"})
    with pytest.raises(ConfigError, match=r"'slot\.drop\.on\.stop' = True: true is not supported.*walflow reset"):
        parse_config({"name": "c", "topic.prefix": "p", "slot.drop.on.stop": True})
    assert parse_config({"name": "c", "topic.prefix": "p", "slot.drop.on.stop": "false"}).slot_drop_on_stop is False
    with pytest.raises(ConfigError, match=r"signal\.consumer\.sasl\.password.*belong|credential in the connector file"):
        parse_config({"name": "c", "topic.prefix": "p", "signal.consumer.sasl.password": "x"})
    with pytest.raises(ConfigError, match="the lake must hold what the source holds"):
        parse_config({"name": "c", "topic.prefix": "p", "value.converter.replace.null.with.default": True})


def test_the_guardrail_warns_or_fails_past_its_maximum() -> None:
    config = parse_config({"name": "c", "topic.prefix": "p", "guardrail.collections.max": 2})
    assert config.check_guardrail(2) is None
    assert "captures 3 tables, more than guardrail.collections.max=2" in (config.check_guardrail(3) or "")
    failing = parse_config(
        {"name": "c", "topic.prefix": "p", "guardrail.collections.max": 2, "guardrail.collections.limit.action": "fail"}
    )
    with pytest.raises(ConfigError, match=r"narrow table\.include\.list"):
        failing.check_guardrail(3)


def test_topic_creation_groups_choose_each_topics_settings() -> None:
    from walflow.kafka import TopicCreation

    config = parse_config({
        "name": "inventory-connector", "topic.prefix": "p", "topic.creation.default.partitions": 3,
        "topic.creation.default.cleanup.policy": "compact", "topic.creation.groups": "big,logs",
        "topic.creation.big.include": r"p\.public\.orders.*", "topic.creation.big.exclude": r"p\.public\.orders_tmp",
        "topic.creation.big.partitions": 12, "topic.creation.big.compression.type": "lz4",
        "topic.creation.logs.include": r"__debezium-heartbeat.*", "topic.creation.logs.cleanup.policy": "delete",
    })  # fmt: skip
    creation = TopicCreation(config)
    assert creation.settings("p.public.orders") == (12, -1, {"cleanup.policy": "compact", "compression.type": "lz4"})
    assert creation.settings("p.public.orders_tmp") == (3, -1, {"cleanup.policy": "compact"})
    assert creation.settings("__debezium-heartbeat.p") == (3, -1, {"cleanup.policy": "delete"})
    with pytest.raises(ConfigError, match=r"'topic\.creation\.x\.include' is required"):
        parse_config({"name": "c", "topic.prefix": "p", "topic.creation.groups": "x", "topic.creation.x.partitions": 2})
    with pytest.raises(ConfigError, match=r"which 'topic\.creation\.groups' does not list"):
        parse_config({"name": "c", "topic.prefix": "p", "topic.creation.y.partitions": 2})


def test_configuration_based_snapshot_mode_reads_as_the_mode_that_does_the_same() -> None:
    base = {"name": "c", "topic.prefix": "p", "snapshot.mode": "configuration_based"}
    flags = "snapshot.mode.configuration.based."
    assert (
        parse_config({**base, flags + "snapshot.data": True, flags + "start.stream": "true"}).snapshot_mode == "always"
    )
    assert parse_config({**base, flags + "start.stream": True}).snapshot_mode == "no_data"
    for refused in (
        {flags + "snapshot.data": True},
        {flags + "start.stream": True, flags + "snapshot.on.data.error": True},
        {},
    ):
        with pytest.raises(ConfigError, match="use 'initial_only'"):
            parse_config({**base, **refused})


def test_read_only_needs_a_state_database_and_no_heartbeat_query() -> None:
    """read.only: walflow writes nothing to the source, so its state must live elsewhere, and no action query runs."""
    with pytest.raises(ConfigError, match=r"set 'walflow\.state\.conn\.id'"):
        parse_config({"name": "c", "topic.prefix": "p", "read.only": True})
    with pytest.raises(ConfigError, match=r"'heartbeat\.action\.query' writes to the source"):
        parse_config(
            {
                "name": "c",
                "topic.prefix": "p",
                "read.only": True,
                "walflow.state.conn.id": "state",
                "heartbeat.interval.ms": 1000,
                "heartbeat.action.query": "UPDATE hb SET t = now()",
            }
        )
    config = parse_config(
        {"name": "c", "topic.prefix": "p", "read.only": "true", "walflow.state.conn.id": "state", "slot.failover": True}
    )
    assert config.read_only and config.walflow_state_conn_id == "state" and config.slot_failover


def test_a_debezium_configuration_with_its_worker_and_queue_keys_loads_as_written() -> None:
    """What a Debezium 3.6 configuration commonly holds beyond the connector's own keys: connector.class, tasks.max,
    plugin.name, the JSON converters, the queue and batch keys, the poll interval, metric tags, replica identities,
    slot.drop.on.stop false and an include list with an escaped comma; each with its meaning here."""
    config = parse_config(
        {
            "name": "inventory",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "plugin.name": "pgoutput",
            "topic.prefix": "inv",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "table.include.list": r"public\.orders, public\.t{1\,2}",
            "max.queue.size": "8192",
            "max.batch.size": "2048",
            "max.queue.size.in.bytes": "5000",
            "poll.interval.ms": "500",
            "custom.metric.tags": "env=prod, team=data",
            "replica.identity.autoset.values": r"public\.orders:FULL,public\.t.*:INDEX t_idx",
            "slot.drop.on.stop": "false",
        }
    )
    assert config.table_include_list == [r"public\.orders", r"public\.t{1,2}"]
    assert config.producer_overrides() == {
        "batch.num.messages": 2048,
        "queue.buffering.max.messages": 8192,
        "queue.buffering.max.kbytes": 5,
    }
    assert config.trigger_poke_seconds() == 0.5
    assert config.model_copy(update={"max_queue_size_in_bytes": 0}).producer_overrides()["batch.num.messages"] == 2048
    assert config.custom_metric_tags == {"env": "prod", "team": "data"}
    assert config.replica_identity_autoset_values == [(r"public\.orders", "FULL"), (r"public\.t.*", "INDEX t_idx")]
    # walflow's own key wins over Debezium's poll interval
    assert parse_config({"name": "c", "topic.prefix": "p", "poll.interval.ms": 500,
                         "walflow.stream.trigger.poke.seconds": 2}).trigger_poke_seconds() == 2  # fmt: skip
    with pytest.raises(ConfigError, match=r"'key\.converter'.*JsonConverter"):
        parse_config({"name": "c", "topic.prefix": "p", "key.converter": "io.confluent.connect.avro.AvroConverter"})
    with pytest.raises(ConfigError, match=r"replica identity is DEFAULT, FULL, NOTHING or INDEX"):
        parse_config({"name": "c", "topic.prefix": "p", "replica.identity.autoset.values": "public.t:EVERYTHING"})
    with pytest.raises(ConfigError, match=r"'env' is not '<key>=<value>'"):
        parse_config({"name": "c", "topic.prefix": "p", "custom.metric.tags": "env"})


def test_a_connector_file_in_kafka_connects_json_form(tmp_path: Path) -> None:
    """A Debezium connector's JSON as Kafka Connect's REST API takes it, in the connectors folder beside YAML files."""
    import json

    from walflow.config.files import connector_files, load_config, resolve

    connector_class = "io.debezium.connector.postgresql.PostgresConnector"
    body = {"name": "shop", "config": {"connector.class": connector_class, "tasks.max": "1", "topic.prefix": "shop"}}
    (tmp_path / "shop.json").write_text(json.dumps(body))
    (tmp_path / "other.yaml").write_text("name: other\ntopic.prefix: other\n")
    assert [p.name for p in connector_files(tmp_path)] == ["other.yaml", "shop.json"]
    config = load_config(tmp_path / "shop.json")
    assert (config.name, config.topic_prefix) == ("shop", "shop")
    assert resolve("shop", directory=tmp_path).name == "shop"
    (tmp_path / "shop.json").write_text(json.dumps({**body, "config": {**body["config"], "name": "shop2"}}))
    with pytest.raises(ConfigError, match="named 'shop' but its config names 'shop2'"):
        load_config(tmp_path / "shop.json")
