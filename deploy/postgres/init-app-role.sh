#!/bin/sh
# The database role the API and the worker connect as: not a superuser (docs/security.md,
# "Operations surface"). Run once, as the superuser, by the postgres image on an empty
# data directory (mounted into /docker-entrypoint-initdb.d by docker-compose.yml); on an
# existing database run it by hand the same way (docs/operations.md): it is idempotent,
# and hands whatever an older stack created as the superuser over to the role.
#
# Environment: POSTGRES_USER / POSTGRES_DB (the image's own: the superuser and the
# service's database), APP_DB_USER (default wds_app) and APP_DB_PASSWORD.
#
# The role gets exactly what the service needs:
# * LOGIN, and ownership of the service's database: the migrations create the `wds`
#   schema and every workspace schema, table, index and sequence, all owned by the role;
# * CREATEROLE: one NOLOGIN read-only role `wds_ro_<workspace>` per workspace (the SQL
#   endpoint `SET LOCAL ROLE`s to it; docs/decisions.md "Read-only SQL role"). Since
#   PostgreSQL 16 a role's creator holds only ADMIN on it; `createrole_self_grant = 'set,
#   inherit'` adds the SET option `SET ROLE` needs and the INHERIT one `DROP OWNED BY` needs
#   when a workspace is dropped. CREATEROLE is not superuser: it cannot create superusers
#   or grant membership in roles it does not administer;
# * nothing else: NOSUPERUSER NOCREATEDB NOREPLICATION NOBYPASSRLS.
# Extensions that need a superuser are created here, once: pgvector (`vector`, semantic
# search columns) and `pg_trgm` (trigram indexes; trusted, but created here too so no
# migration depends on it).
set -eu
: "${APP_DB_PASSWORD:?set APP_DB_PASSWORD (the password of the service's database role)}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-wds}" \
     -v app_user="${APP_DB_USER:-wds_app}" -v app_password="$APP_DB_PASSWORD" <<'SQL'
SELECT format('CREATE ROLE %I', :'app_user')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'app_user') \gexec
ALTER ROLE :"app_user" WITH LOGIN CREATEROLE NOSUPERUSER NOCREATEDB NOREPLICATION NOBYPASSRLS
  PASSWORD :'app_password';
ALTER ROLE :"app_user" SET createrole_self_grant = 'set, inherit';
SELECT format('ALTER DATABASE %I OWNER TO %I', current_database(), :'app_user') \gexec
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
-- A database that was run as the superuser before (an older stack): hand its schemas,
-- tables, sequences and functions to the role, and the workspaces' read-only roles too.
-- Nothing to do on a new database.
SELECT set_config('wds.app_user', :'app_user', false);
DO $adopt$
DECLARE
  app text := current_setting('wds.app_user');
  r record;
BEGIN
  FOR r IN SELECT n.nspname FROM pg_namespace n
            WHERE (n.nspname IN ('wds', 'wds_sql') OR n.nspname LIKE 'ws\_%') AND pg_get_userbyid(n.nspowner) <> app LOOP
    EXECUTE format('ALTER SCHEMA %I OWNER TO %I', r.nspname, app);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE (n.nspname IN ('wds', 'wds_sql') OR n.nspname LIKE 'ws\_%') AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
              AND pg_get_userbyid(c.relowner) <> app
              -- identity and serial sequences follow their table
              AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                                                    AND d.objid = c.oid AND d.deptype IN ('a', 'i'))) LOOP
    EXECUTE format('ALTER %s %s OWNER TO %I',
                   CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                  ELSE 'TABLE' END, r.rel, app);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE (n.nspname IN ('wds', 'wds_sql') OR n.nspname LIKE 'ws\_%') AND pg_get_userbyid(p.proowner) <> app LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO %I', r.fn, app);
  END LOOP;
  FOR r IN SELECT rolname FROM pg_roles WHERE rolname LIKE 'wds\_ro\_%'
              AND NOT pg_has_role(app, oid, 'SET') LOOP
    EXECUTE format('GRANT %I TO %I WITH ADMIN TRUE, INHERIT TRUE, SET TRUE', r.rolname, app);
  END LOOP;
END
$adopt$;
SQL
