"""The SQL an administrator runs on the source database, shipped as package data: ``roles.sql`` (the connector's
least-privilege roles and grants) and ``ddl_facts.sql`` (the DDL trigger that records keys as they were at each
change). ``walflow sql roles`` and ``walflow sql ddl_facts`` print them."""
