-- walflow's DDL facts: the key of a table as it is after each DDL, written into the WAL in the DDL's own transaction.
--
-- walflow reads a table's definition from the catalog when a batch reaches a change of a table whose definition
-- changed, which may be after later DDL of the same table (its primary key dropped, another one added): the key
-- of the earlier changes is then unknown. Debezium reads the catalog as it streams, close to when each change was
-- made. With this event trigger installed, every DDL that creates or alters a table (or an index on it) writes
-- one transactional logical decoding message, prefix 'walflow.ddl', holding the table's key as the DDL left it,
-- and the stream keys each change by the fact in force at its position (docs/events.md: "Keys at each change").
--
-- Run once per captured database, as a superuser (event triggers need one):
--     walflow sql ddl_facts | psql -d <database>
-- Remove with: DROP EVENT TRIGGER walflow_ddl_facts; DROP SCHEMA walflow_ddl CASCADE;
--
-- The function never stops the DDL that fired it: an error of its own becomes a warning. Messages are visible to
-- every logical slot of the database (a Debezium connector emits them on its message topic; walflow does the same,
-- as Debezium would; message.prefix.exclude.list: walflow\.ddl leaves them out of both).

CREATE SCHEMA IF NOT EXISTS walflow_ddl;
REVOKE ALL ON SCHEMA walflow_ddl FROM PUBLIC;

CREATE OR REPLACE FUNCTION walflow_ddl.table_facts() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $walflow$
DECLARE
    rel oid;
    fact jsonb;
BEGIN
    FOR rel IN
        SELECT DISTINCT CASE WHEN c.object_type = 'index'
                             THEN (SELECT i.indrelid FROM pg_catalog.pg_index i WHERE i.indexrelid = c.objid)
                             ELSE c.objid END
        FROM pg_catalog.pg_event_trigger_ddl_commands() c
        WHERE c.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
          AND c.object_type IN ('table', 'table column', 'index')
    LOOP
        -- the key as walflow's catalog reader (walflow.source.catalog) picks it: the primary key, else the first unique
        -- index on plain columns (a clustered one first, then by name)
        SELECT pg_catalog.jsonb_build_object(
                   'v', 1,
                   'oid', t.oid,
                   'schema', n.nspname,
                   'table', t.relname,
                   'identity', t.relreplident::text,
                   -- attribute numbers, which a later rename does not change
                   'primary_key', pg_catalog.to_jsonb(COALESCE(
                       (SELECT i.indkey::int2[] FROM pg_catalog.pg_index i WHERE i.indrelid = t.oid AND i.indisprimary),
                       ARRAY[]::int2[])),
                   'unique_key', pg_catalog.to_jsonb(COALESCE(
                       (SELECT i.indkey::int2[]
                        FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
                        WHERE i.indrelid = t.oid AND i.indisunique AND NOT i.indisprimary AND i.indexprs IS NULL
                        ORDER BY NOT i.indisclustered, ic.relname
                        LIMIT 1),
                       ARRAY[]::int2[])))
        INTO fact
        FROM pg_catalog.pg_class t JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
        WHERE t.oid = rel AND t.relkind IN ('r', 'p');
        IF fact IS NOT NULL THEN
            PERFORM pg_catalog.pg_logical_emit_message(true, 'walflow.ddl', fact::text);
        END IF;
    END LOOP;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'walflow_ddl_facts: no DDL fact written (%); walflow reads this table''s key from the catalog', SQLERRM;
END
$walflow$;

REVOKE ALL ON FUNCTION walflow_ddl.table_facts() FROM PUBLIC;

DROP EVENT TRIGGER IF EXISTS walflow_ddl_facts;
CREATE EVENT TRIGGER walflow_ddl_facts ON ddl_command_end EXECUTE FUNCTION walflow_ddl.table_facts();
