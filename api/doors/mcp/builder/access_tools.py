"""Builder tools for access (profiles, grants, token metadata) and stored credentials.

Secrets never leave: token listings show metadata and the 12-character prefix only, and
a credential's secret is encrypted on the way in (``storage/secrets.py``) and never
returned.
"""

from __future__ import annotations

from typing import Any

import psycopg

from api.doors.mcp.builder.common import builder, positive_id
from api.doors.mcp.spec import ID_OR_NAME, TABLE_ID, ToolSpec, boolean, integer, jsonable, obj, out, string
from api.ops.access import table_for
from api.state import AppState
from storage import access, objects, secrets
from storage.access import Action, BucketPerms, Perms, Principal
from storage.errors import Conflict, NotFound

_CREDENTIAL_OUT = out({"id": {"type": "integer"}, "name": {"type": "string"}, "type": {"type": "string"},
                       "header_name": {"type": ["string", "null"]},
                       "hosts": {"type": "array", "items": {"type": "string"}}}, ("id", "name", "type", "hosts"))


async def list_access_profiles(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    async with state.db.connection() as conn:
        cur = await conn.execute(
            "SELECT p.id, p.name, p.created_at,"
            " coalesce((SELECT jsonb_agg(jsonb_build_object('table_id', g.table_id, 'read', g.can_read,"
            "   'create', g.can_create, 'update', g.can_update, 'delete', g.can_delete) ORDER BY g.table_id)"
            "   FROM wds.grants g WHERE g.profile_id = p.id), '[]') AS grants,"
            " coalesce((SELECT jsonb_agg(jsonb_build_object('bucket_id', bg.bucket_id, 'read', bg.can_read,"
            "   'write', bg.can_write, 'all_paths', bg.all_paths) ORDER BY bg.bucket_id)"
            "   FROM wds.bucket_grants bg WHERE bg.profile_id = p.id), '[]') AS bucket_grants,"
            " (SELECT count(*) FROM wds.tokens t WHERE t.profile_id = p.id AND t.revoked_at IS NULL) AS tokens"
            " FROM wds.access_profiles p WHERE p.workspace_id = %s ORDER BY p.id",
            (principal.workspace_id,),
        )
        rows = await cur.fetchall()
    return {"profiles": jsonable(rows)}


async def grant_table_access(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    table = await table_for(state, principal, args["table_id"], Action.READ)
    profile_id = positive_id(args["profile_id"], "profile_id")
    perms = Perms(read=args.get("read", True), create=args.get("create", False),
                  update=args.get("update", False), delete=args.get("delete", False))
    async with state.db.transaction() as conn:
        profile = await access.get_profile(conn, workspace_id=principal.workspace_id, profile_id=profile_id)
        if profile is None:
            raise NotFound(f"access profile {profile_id} not found")
        if perms == Perms():
            await conn.execute("DELETE FROM wds.grants WHERE profile_id = %s AND table_id = %s",
                               (profile_id, table.id))
        else:
            await access.upsert_grant(conn, profile_id=profile_id, table_id=table.id, perms=perms)
        # every process drops its cached principals: the new rights apply on the next call
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    return {"profile_id": profile_id, "table_id": table.id, **perms.as_dict()}


async def grant_bucket_access(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    profile_id = positive_id(args["profile_id"], "profile_id")
    perms = BucketPerms(read=args.get("read", True), write=args.get("write", False),
                        all_paths=args.get("all_paths", False))
    async with state.db.transaction() as conn:
        bucket = await objects.get_bucket(conn, workspace_id=principal.workspace_id, ref=args["bucket"])
        if bucket is None:
            raise NotFound(f"bucket {args['bucket']!r} not found")
        profile = await access.get_profile(conn, workspace_id=principal.workspace_id, profile_id=profile_id)
        if profile is None:
            raise NotFound(f"access profile {profile_id} not found")
        await access.upsert_bucket_grant(conn, profile_id=profile_id, bucket_id=bucket["id"], perms=perms)
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    return {"profile_id": profile_id, "bucket_id": bucket["id"], **perms.as_dict()}


async def list_tokens(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    async with state.db.connection() as conn:
        rows = await access.list_tokens(conn, workspace_id=principal.workspace_id)
    return {"tokens": jsonable(rows)}


async def create_credential(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    name, kind, secret, header_name, hosts = secrets.check_credential(
        name=args["name"], type=args["type"], secret=args["secret"], header_name=args.get("header_name"),
        hosts=args.get("hosts"))
    sealed = secrets.SecretBox(state.settings.secret_key).encrypt(secret)
    try:
        async with state.db.connection() as conn:
            row = await secrets.create_credential(conn, workspace_id=principal.workspace_id, name=name,
                                                  type=kind, header_name=header_name, sealed=sealed, hosts=hosts)
    except psycopg.errors.UniqueViolation:
        raise Conflict(f"a credential named {name!r} already exists") from None
    return jsonable(row)


async def list_credentials(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    async with state.db.connection() as conn:
        rows = await secrets.list_credentials(conn, workspace_id=principal.workspace_id)
    return {"credentials": jsonable(rows)}


async def delete_credential(state: AppState, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    async with state.db.connection() as conn:
        row = await secrets.delete_credential(conn, workspace_id=principal.workspace_id, ref=args["credential"])
    if row is None:
        raise NotFound(f"credential {args['credential']!r} not found")
    return {"id": row["id"], "name": row["name"], "deleted": True}


ACCESS_TOOLS: list[ToolSpec] = [
    builder("list_access_profiles", "List access profiles",
            "Access profiles (the permission sets tokens belong to) with their table grants.",
            list_access_profiles, obj({}), out({"profiles": {"type": "array"}}, ("profiles",)),
            read_only=True, idempotent=True),
    builder("grant_table_access", "Grant table access",
            "Set one profile's rights on one table (all false removes the grant); applies to its tokens at once.",
            grant_table_access, obj({
                "profile_id": integer("the access profile's id"), "table_id": TABLE_ID,
                "read": boolean("read records (default true)"), "create": boolean("create records"),
                "update": boolean("update records"), "delete": boolean("delete records"),
            }, ("profile_id", "table_id")),
            out({"profile_id": {"type": "integer"}, "table_id": {"type": "integer"}}, ("profile_id", "table_id")),
            idempotent=True),
    builder("grant_bucket_access", "Grant bucket access",
            "Set one profile's rights on one storage bucket (all false removes the grant): read lists,"
            " downloads and signs; write uploads and deletes. App users acting through the profile stay"
            " under users/<their id>/ unless all_paths. Applies to its tokens at once.",
            grant_bucket_access, obj({
                "profile_id": integer("the access profile's id"),
                "bucket": {"type": ID_OR_NAME, "description": "the bucket's id or name"},
                "read": boolean("list, download and sign (default true)"),
                "write": boolean("upload and delete"),
                "all_paths": boolean("app users reach every path, not only users/<their id>/"),
            }, ("profile_id", "bucket")),
            out({"profile_id": {"type": "integer"}, "bucket_id": {"type": "integer"}},
                ("profile_id", "bucket_id")),
            idempotent=True),
    builder("list_tokens", "List tokens",
            "Token metadata (type, name, prefix, profile, expiry, revocation, last use); never secrets.",
            list_tokens, obj({}), out({"tokens": {"type": "array"}}, ("tokens",)), read_only=True, idempotent=True),
    builder("create_credential", "Create a credential",
            "Store a secret for http_request steps (named in config.credential); it is encrypted and never shown"
            " again. It is sent only to hosts matching one of its host patterns.",
            create_credential, obj({
                "name": string("unique name steps refer to"),
                "type": string("how it is sent", enum=list(secrets.CREDENTIAL_TYPES)),
                "secret": string("the secret (basic: user:password)"),
                "header_name": string("header credentials: the header; query credentials: the parameter name"),
                "hosts": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": (
                    "host patterns it may be sent to: 'api.stripe.com', '*.example.com' (subdomains, not the"
                    " apex), '127.0.0.1:8443' (a pattern without a port matches any port)")},
            }, ("name", "type", "secret", "hosts")), _CREDENTIAL_OUT),
    builder("list_credentials", "List credentials",
            "Stored credentials' names, types and host patterns; never the secrets.",
            list_credentials, obj({}), out({"credentials": {"type": "array"}}, ("credentials",)),
            read_only=True, idempotent=True),
    builder("delete_credential", "Delete a credential", "Delete a stored credential by id or name.",
            delete_credential, obj({"credential": {"type": ID_OR_NAME, "description": "the credential's id or name"}},
                                   ("credential",)),
            out({"id": {"type": "integer"}, "deleted": {"type": "boolean"}}, ("id", "deleted")),
            destructive=True, idempotent=True),
]
