-- Least-privilege roles for a walflow connector (the reference's "Setting up permissions"), run by a superuser
-- or the tables' owner in the captured database with psql:
--
--   psql -d inventory -v role=walflow -v password='...' -v owners=walflow_owners -v schema=public \
--        -v tables='public.customers,public.products,public.orders' \
--        [-v signal_table=public.walflow_signal -v signal_writers=snapshot_operators] -f include/sql/roles.sql
--
-- * :role logs in with REPLICATION: enough for a logical slot and pgoutput, nothing else server-wide.
-- * A 'filtered' publication (publication.autocreate.mode) may only be created by the owner of every table
--   it names, so ownership of the captured tables moves to the NOLOGIN group :owners, of which both the
--   connector role and the role that owned them before are members: the application keeps working as before.
--   (With 'disabled', create the publication yourself and skip the ownership part; 'all_tables' needs a
--   superuser.)
-- * CREATE on the database lets the role create the publication; CREATE on :schema lets setup create the
--   state table (walflow.state.table) and the signal table (signal.data.collection), which the role then owns.
-- * Snapshots read the tables: SELECT comes with the group's ownership; the explicit grant keeps it if the
--   ownership part is skipped.
-- * heartbeat.action.query runs as :role too: grant it what the query needs (e.g. UPDATE on the heartbeat table).
-- The password is a psql variable so that it never lands in this file; the Airflow Connection holds it.

\set ON_ERROR_STOP on

CREATE ROLE :"role" WITH LOGIN REPLICATION PASSWORD :'password';
CREATE ROLE :"owners" NOLOGIN;
GRANT :"owners" TO :"role";

-- the tables' current owners join the group before handing it their tables
SELECT DISTINCT format('GRANT %I TO %I', :'owners', pg_get_userbyid(c.relowner))
FROM unnest(string_to_array(:'tables', ',')) AS t(name)
JOIN pg_class c ON c.oid = trim(t.name)::regclass
WHERE pg_get_userbyid(c.relowner) <> :'owners'
\gexec

SELECT format('ALTER TABLE %s OWNER TO %I', trim(t.name)::regclass, :'owners')
FROM unnest(string_to_array(:'tables', ',')) AS t(name)
\gexec

SELECT format('GRANT CREATE ON DATABASE %I TO %I', current_database(), :'role')
\gexec
GRANT USAGE, CREATE ON SCHEMA :"schema" TO :"role";

SELECT format('GRANT SELECT ON %s TO %I', trim(t.name)::regclass, :'role')
FROM unnest(string_to_array(:'tables', ',')) AS t(name)
\gexec

-- SELECT alone does not reach a table in a schema the role may not use: USAGE on every captured table's schema.
SELECT DISTINCT format('GRANT USAGE ON SCHEMA %I TO %I', n.nspname, :'role')
FROM unnest(string_to_array(:'tables', ',')) AS t(name)
JOIN pg_class c ON c.oid = trim(t.name)::regclass
JOIN pg_namespace n ON n.oid = c.relnamespace
\gexec

-- Signals (optional: only with -v signal_table=<schema.table>, the connector's signal.data.collection).
-- The signal table is created here, owned by :owners like the captured tables (a 'filtered' publication names
-- it too), with the columns the setup DAG would give it; the setup DAG then finds it and leaves it alone.
-- With -v signal_writers=<existing role>, that role gets INSERT on it and nothing else: whoever may start
-- ad-hoc snapshots. An 'execute-snapshot' signal's additional-condition is SQL the connector runs, so name a
-- role of trusted users only.
\if :{?signal_table}
SELECT format('CREATE TABLE IF NOT EXISTS %I.%I (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL)',
              (parse_ident(:'signal_table'))[1], (parse_ident(:'signal_table'))[2])
\gexec
SELECT format('ALTER TABLE %I.%I OWNER TO %I', (parse_ident(:'signal_table'))[1], (parse_ident(:'signal_table'))[2], :'owners')
\gexec
\if :{?signal_writers}
SELECT format('GRANT INSERT ON %I.%I TO %I', (parse_ident(:'signal_table'))[1], (parse_ident(:'signal_table'))[2], :'signal_writers')
\gexec
\endif
\endif
