"""What the operator declares, validated before anything runs.

- :mod:`~walflow.config.connector`: :class:`~walflow.config.connector.ConnectorConfig`, Debezium's property names and
  defaults plus walflow's own, and :func:`~walflow.config.connector.parse_config`;
- :mod:`~walflow.config.files`: the connectors folder's YAML files, read and found by name;
- :mod:`~walflow.config.filters`: the include and exclude lists and ``message.key.columns``;
- :mod:`~walflow.config.patterns`: users' regular expressions, matched with a time bound;
- :mod:`~walflow.config.expressions`: users' SQL conditions and their templates.

Nothing here touches a database or a broker.
"""
