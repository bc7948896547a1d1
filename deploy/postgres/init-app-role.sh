#!/bin/sh
# The database role the API and the worker connect as: not a superuser (docs/security.md,
# "Operations surface"). Run once, as the superuser, by the postgres image on an empty
# data directory (mounted into /docker-entrypoint-initdb.d by docker-compose.yml); on an
# existing database run it by hand the same way (docs/operations.md).
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
SQL
