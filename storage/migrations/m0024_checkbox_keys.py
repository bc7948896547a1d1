"""A data checkbox's btree is keyed ``(coalesce(value, false), id)`` (docs/decisions.md,
"A checkbox never set is false, in order too").

A box never set reads as ``false`` on every door and filters as false, but it sorted on
the column itself, NULL apart from the false ones: ``order=Done.asc`` answered false,
true, then the never-set boxes shown as false. The query compiler now sorts (and
filters) on ``coalesce(value, false)``, so every existing ``t_<t>_c_<c>`` of a checkbox
column that is not of that form is rebuilt in place, as m0017 and m0022 did for theirs
(large deployments may pre-create the new index ``CONCURRENTLY`` under another name and
swap, docs/operations.md "Scale"). No cell is written. Running it again changes nothing:
an index already of the new form, or missing, is left alone.
"""

from __future__ import annotations

from sqlalchemy import Connection

from storage.migrations._value_indexes import rebuild_value_indexes
from storage.schema import ColumnMeta, ColumnType


def upgrade(conn: Connection) -> None:
    rebuild_value_indexes(conn, "c.type = 'checkbox'", lambda r: ColumnMeta(
        id=int(r["id"]), table_id=int(r["table_id"]), name="", type=ColumnType.CHECKBOX))
