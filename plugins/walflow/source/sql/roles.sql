-- Least-privilege roles for a walflow connector (the reference's "Setting up permissions"), run by a superuser in
-- the captured database with psql. Safe to run again (for tables added later, or to change a password):
--
--   psql -d inventory -v role=walflow -v password='...' -v schema=public \
--        -v tables='public.customers,public.products,public.orders' \
--        [-v reader=walflow_reader -v reader_password='...'] \
--        [-v publication=walflow_inventory] \
--        [-v signal_table=public.walflow_signal -v signal_writers=snapshot_operators] -f roles.sql
--   (walflow sql roles > roles.sql writes this file from the installed package)
--
-- * :role logs in with REPLICATION: enough for a logical slot and pgoutput, nothing else server-wide.
-- * The publication. PostgreSQL lets only the owner of every table a publication names create it, so:
--   - with -v publication=<name> (recommended), this script creates the publication itself, for the tables (and the
--     signal table), and the connector owns none of the captured tables: configure
--     'publication.autocreate.mode: disabled' (a table added later is added by running this script again);
--   - without it, 'publication.autocreate.mode: filtered' has the connector create the publication, so it must own
--     the tables: each table owner O hands its captured tables to a NOLOGIN group of its own, '<role>_owns_<O>',
--     whose members are O and :role. O keeps working as before; no two applications' roles are ever put in one
--     group, so none gains another's tables. The connector can then alter those tables (and create triggers on
--     them), which is what ownership means in PostgreSQL: prefer -v publication.
--   ('all_tables' needs a superuser to create the publication.)
-- * CREATE on the database lets the role create a 'filtered' publication; CREATE on :schema lets setup create the
--   state table (walflow.state.table), which the role then owns.
-- * Snapshots read the tables: SELECT on each, and USAGE on their schemas.
-- * :reader (optional, with :reader_password) is the role that evaluates the conditions of incremental-snapshot
--   signals ('walflow.postgres.reader.conn.id'): it logs in, may SELECT the captured tables and nothing more (no
--   REPLICATION, no ownership, no membership). Without it, signals that carry a condition fail.
-- * pg_logical_emit_message is EXECUTE-able by PUBLIC by default: any login could write a logical decoding message
--   into the WAL the connector reads (one too large for a Kafka record stops it). It is revoked from PUBLIC here and
--   granted to :role (the incremental snapshots' watermarks), in this database.
-- * heartbeat.action.query runs as :role too: grant it what the query needs (e.g. UPDATE on the heartbeat table).
-- Passwords are psql variables so that they never land in this file; the Airflow Connections hold them.

\set ON_ERROR_STOP on

SELECT format('CREATE ROLE %I WITH LOGIN REPLICATION', :'role')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role')
\gexec
ALTER ROLE :"role" WITH LOGIN REPLICATION PASSWORD :'password';

\if :{?reader}
SELECT format('CREATE ROLE %I WITH LOGIN', :'reader')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'reader')
\gexec
ALTER ROLE :"reader" WITH LOGIN NOSUPERUSER NOREPLICATION NOBYPASSRLS NOCREATEROLE NOCREATEDB PASSWORD :'reader_password';
\endif

-- the captured tables, once: name, schema, current owner
CREATE TEMP TABLE walflow_captured AS
SELECT c.oid::regclass AS rel, n.nspname AS schema_name, pg_get_userbyid(c.relowner) AS owner
FROM unnest(string_to_array(:'tables', ',')) AS t(name)
JOIN pg_class c ON c.oid = trim(t.name)::regclass
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE trim(t.name) <> '';

\if :{?publication}
-- the script's runner creates the publication: the connector owns nothing it captures
SELECT format('CREATE PUBLICATION %I', :'publication')
WHERE NOT EXISTS (SELECT FROM pg_publication WHERE pubname = :'publication')
\gexec
SELECT format('ALTER PUBLICATION %I ADD TABLE %s', :'publication', rel)
FROM walflow_captured
WHERE NOT EXISTS (SELECT FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
                  WHERE p.pubname = :'publication' AND pr.prrelid = rel)
\gexec
\else
-- one owner group per table owner (its name shortened with a hash where PostgreSQL's 63 characters would cut it)
CREATE TEMP TABLE walflow_owner_groups AS
SELECT DISTINCT owner,
       CASE WHEN length(:'role' || '_owns_' || owner) <= 63 THEN :'role' || '_owns_' || owner
            ELSE left(:'role' || '_owns_' || owner, 54) || '_' || left(md5(owner), 8) END AS grp
FROM walflow_captured
WHERE owner NOT LIKE :'role' || '\_owns\_%';

SELECT format('CREATE ROLE %I NOLOGIN', grp) FROM walflow_owner_groups
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = grp)
\gexec
SELECT format('GRANT %I TO %I', grp, owner) FROM walflow_owner_groups
\gexec
SELECT format('GRANT %I TO %I', grp, :'role') FROM walflow_owner_groups
\gexec
SELECT format('ALTER TABLE %s OWNER TO %I', c.rel, g.grp)
FROM walflow_captured c JOIN walflow_owner_groups g USING (owner)
\gexec
\endif

SELECT format('GRANT CREATE ON DATABASE %I TO %I', current_database(), :'role')
\gexec
GRANT USAGE, CREATE ON SCHEMA :"schema" TO :"role";

SELECT format('GRANT SELECT ON %s TO %I', rel, :'role') FROM walflow_captured
\gexec
-- SELECT alone does not reach a table in a schema the role may not use: USAGE on every captured table's schema.
SELECT DISTINCT format('GRANT USAGE ON SCHEMA %I TO %I', schema_name, :'role') FROM walflow_captured
\gexec

\if :{?reader}
SELECT format('GRANT SELECT ON %s TO %I', rel, :'reader') FROM walflow_captured
\gexec
SELECT DISTINCT format('GRANT USAGE ON SCHEMA %I TO %I', schema_name, :'reader') FROM walflow_captured
\gexec
\endif

-- logical decoding messages: the connector's, not every login's
SELECT format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', p.oid::regprocedure)
FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
\gexec
SELECT format('GRANT EXECUTE ON FUNCTION %s TO %I', p.oid::regprocedure, :'role')
FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
\gexec

-- Signals (optional: only with -v signal_table=<schema.table>, the connector's signal.data.collection).
-- The signal table is created here, owned by :role (no application role owns it), with the columns the setup DAG
-- would give it; the setup DAG then finds it and leaves it alone. With -v signal_writers=<existing role>, that role
-- gets INSERT on it and nothing else: whoever may start ad-hoc snapshots. A signal's additional-condition is checked
-- and evaluated as :reader (see above); docs/operations.md's "Security" section says what a signal writer can still learn.
\if :{?signal_table}
SELECT format('CREATE TABLE IF NOT EXISTS %I.%I (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL)',
              (parse_ident(:'signal_table'))[1], (parse_ident(:'signal_table'))[2])
\gexec
SELECT format('ALTER TABLE %I.%I OWNER TO %I', (parse_ident(:'signal_table'))[1], (parse_ident(:'signal_table'))[2], :'role')
\gexec
\if :{?publication}
SELECT format('ALTER PUBLICATION %I ADD TABLE %I.%I', :'publication', (parse_ident(:'signal_table'))[1], (parse_ident(:'signal_table'))[2])
WHERE NOT EXISTS (SELECT FROM pg_publication_tables WHERE pubname = :'publication'
                  AND schemaname = (parse_ident(:'signal_table'))[1] AND tablename = (parse_ident(:'signal_table'))[2])
\gexec
\endif
\if :{?signal_writers}
SELECT format('GRANT INSERT ON %I.%I TO %I', (parse_ident(:'signal_table'))[1], (parse_ident(:'signal_table'))[2], :'signal_writers')
\gexec
\endif
\endif
