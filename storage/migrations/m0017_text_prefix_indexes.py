"""A data text column's btree holds ``(left(value, 200), id)`` (docs/decisions.md, "Long
text in data text columns").

Since m0015 each text column's btree was ``(value, id)``: a btree entry must stay under
~2.7 kB, so a text of a few thousand incompressible characters could not be written at
all. Every existing ``t_<t>_c_<c>`` of a text column that is not of the new form is
rebuilt in place (as m0015 did; large deployments may pre-create the new index
``CONCURRENTLY`` under another name and swap, docs/operations.md "Scale"). Running it
again changes nothing: an index already of the new form, or missing, is left alone.
"""

from __future__ import annotations

from sqlalchemy import Connection

from storage.migrations._value_indexes import rebuild_value_indexes
from storage.schema import ColumnMeta, ColumnType


def upgrade(conn: Connection) -> None:
    rebuild_value_indexes(conn, "c.type = 'text'", lambda r: ColumnMeta(
        id=int(r["id"]), table_id=int(r["table_id"]), name="", type=ColumnType.TEXT))
