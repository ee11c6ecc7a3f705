"""The lake job's settings: one model, built once from the connector's configuration, handed to the job whole.

The connector keys (``walflow.lake.*``, ``topic.prefix``, ``topic.delimiter``, ``topic.transaction``,
``toasted.value.placeholder``) keep their defaults in :class:`walflow.config.connector.ConnectorConfig`; what is derived
from them (the namespace, the warehouse) is derived here and nowhere else. The Airflow task passes
:meth:`LakeSettings.argument` on the job's command line; Kafka's settings, which may hold credentials, reach the
job through its environment instead (``WALFLOW_KAFKA_CONFIG``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from walflow.errors import ConfigError
from walflow.lake.naming import is_table_topic, sql_quote
from walflow.names import topic_name

#: a brace that would start a Jinja tag: ``{{``, ``{%`` or ``{#`` (see LakeSettings.argument)
_TAG_START = re.compile(r"\{(?=[{%#])")

if TYPE_CHECKING:
    from walflow.config.connector import ConnectorConfig

KAFKA_ENV = "WALFLOW_KAFKA_CONFIG"
#: Spark settings with secrets (a JDBC catalog's password), JSON, in the lake job's environment
CATALOG_ENV = "WALFLOW_LAKE_CATALOG_CONF"


def default_warehouse() -> str:
    """The warehouse of the default Hadoop catalog when ``walflow.lake.warehouse`` is not set:
    ``$WALFLOW_WAREHOUSE``, else ``$AIRFLOW_HOME/walflow/warehouse``. A folder on one machine serves one worker; a
    deployment with several names shared storage (``walflow.lake.warehouse``) or a catalog Connection."""
    home = Path(os.environ.get("AIRFLOW_HOME") or "~/airflow").expanduser()
    return os.environ.get("WALFLOW_WAREHOUSE") or str(home / "walflow" / "warehouse")


class LakeSettings(BaseModel):
    """Everything the lake job needs to know about one connector's lake (no credentials)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connector: str
    topic_prefix: str
    topic_delimiter: str
    topic_transaction: str
    catalog: str
    namespace: str
    warehouse: str
    max_records: int
    delete_mode: Literal["hard", "soft"]
    changelog: bool
    toasted_value_placeholder: str
    #: whether Debezium writes a bytea column's unchanged TOASTed value as null (``binary.handling.mode`` base64 or
    #: base64-url-safe): the lake then reads the header naming such values (records.facts.UNAVAILABLE_HEADER) for
    #: string columns too
    binary_placeholder_null: bool = False
    #: the connector's schema facts (walflow.capture.schema_facts); "" when none are kept
    schema_topic: str = ""
    #: "<topic>:<partition>:<offset>" of records whose unconvertible values are accepted (docs/lake.md)
    accept_records: tuple[str, ...] = ()
    #: maintenance: snapshots older than this are expired (never the ones the next apply needs)
    snapshot_retention_hours: float = 120.0
    #: maintenance: files in a table's folder that no snapshot references and older than this are removed
    orphan_retention_hours: float = 72.0

    @field_validator("accept_records")
    @classmethod
    def _records(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            topic, _, rest = entry.partition(":")
            partition, _, offset = rest.partition(":")
            if not (topic and partition.isdigit() and offset.isdigit()):
                raise ValueError(f"{entry!r} is not '<topic>:<partition>:<offset>'")
        return value

    @classmethod
    def from_config(cls, config: ConnectorConfig, **overrides: Any) -> LakeSettings:
        """The settings of ``config``'s lake; ``overrides`` replace single fields (tests, benchmarks)."""
        values: dict[str, Any] = {
            "connector": config.name,
            "topic_prefix": config.topic_prefix,
            "topic_delimiter": config.topic_delimiter,
            "topic_transaction": config.topic_transaction,
            "catalog": config.walflow_lake_catalog,
            "namespace": config.walflow_lake_namespace or config.topic_prefix,
            "warehouse": config.walflow_lake_warehouse or default_warehouse(),
            "max_records": config.walflow_lake_max_records,
            "delete_mode": config.walflow_lake_delete_mode,
            "changelog": config.walflow_lake_changelog,
            "toasted_value_placeholder": config.toasted_value_placeholder,
            "binary_placeholder_null": config.binary_handling_mode in ("base64", "base64-url-safe"),
            "schema_topic": config.schema_topic,
            "accept_records": tuple(config.walflow_lake_accept_records),
            "snapshot_retention_hours": config.walflow_lake_maintain_snapshot_retention_hours,
            "orphan_retention_hours": config.walflow_lake_maintain_orphan_retention_hours,
        }
        values.update(overrides)
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError(f"connector {config.name}: walflow.lake settings are invalid: {exc}") from exc

    # -- on the command line ---------------------------------------------------------------------------
    def argument(self) -> str:
        """The settings as the job's ``--settings`` argument of a templated Airflow task: JSON that Jinja renders
        as it is.

        Jinja starts a tag only at ``{{``, ``{%`` or ``{#``. In JSON text a ``{`` outside a string is followed by
        ``"`` or ``}``, so such a pair can only be inside a string value, where JSON may write the brace as
        ``\\u007b``: every ``{`` followed by ``{``, ``%`` or ``#`` is written so, and the text holds no tag
        whatever the settings say (wrapping it in a ``raw`` block was not enough: ``{%endraw%}`` in a value closed
        the block)."""
        return _TAG_START.sub(r"\\u007b", self.model_dump_json())

    @classmethod
    def from_argument(cls, text: str) -> LakeSettings:
        if text.startswith("{% raw %}") and text.endswith("{% endraw %}"):  # written by an earlier walflow
            text = text[len("{% raw %}") : -len("{% endraw %}")]
        return cls.model_validate_json(text)

    # -- names -------------------------------------------------------------------------------------------
    @property
    def soft_deletes(self) -> bool:
        return self.delete_mode == "soft"

    @property
    def transaction_topic(self) -> str:
        return topic_name(self.topic_prefix, self.topic_transaction, delimiter=self.topic_delimiter)

    def is_table_topic(self, topic: str) -> bool:
        return is_table_topic(topic, self.topic_prefix, self.topic_delimiter, self.topic_transaction)

    def namespace_ident(self) -> str:
        return f"{sql_quote(self.catalog)}.{sql_quote(self.namespace)}"

    def ident(self, table: str) -> str:
        """The quoted Spark identifier of lake table ``table``."""
        return f"{self.namespace_ident()}.{sql_quote(table)}"

    def placeholders(self) -> tuple[Any, ...]:
        # pyarrow's module (the lake extra) is imported only where the lake's values are built
        from walflow.lake.types import placeholder_values

        return placeholder_values(self.toasted_value_placeholder)

    def accepted(self, topic: str) -> frozenset[tuple[int, int]]:
        """(partition, offset) of ``topic``'s records listed in ``accept_records``."""
        out = set()
        for entry in self.accept_records:
            name, partition, offset = entry.rsplit(":", 2)
            if name == topic:
                out.add((int(partition), int(offset)))
        return frozenset(out)
