"""The source database, in plain psycopg 3.

- :mod:`~walflow.source.connection`: sessions with the settings the converters expect, server checks;
- :mod:`~walflow.source.publication`: the captured tables, the publication, privileges, replica identity (read only);
- :mod:`~walflow.source.prepare`: what setup changes there (publication, slot);
- :mod:`~walflow.source.slot`, :mod:`~walflow.source.health`, :mod:`~walflow.source.locks`: the replication slot, its
  health, and the advisory locks (one consumer per slot, one lake writer per connector);
- :mod:`~walflow.source.catalog`, :mod:`~walflow.source.ddl_facts`: tables, columns and keys as the catalog and the
  DDL say them;
- :mod:`~walflow.source.pgoutput`: the logical replication protocol's messages;
- :mod:`~walflow.source.state`, :mod:`~walflow.source.signals`: walflow's own tables there (state, signals);
- :mod:`~walflow.source.queries`: SQL composed from names walflow does not choose.
"""
