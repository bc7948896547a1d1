"""A number-typed computed column's btree is keyed by its value as a double (``float8``),
as a data number column's is, instead of ``numeric`` (docs/decisions.md, "Typed computed
values").

Every existing ``t_<t>_c_<c>`` of a computed column of value type ``number`` that is not
of the new form (storage/ddl.py ``value_index_is_current``) is rebuilt in place, as m0017
did for text (large deployments may pre-create the new index ``CONCURRENTLY`` under
another name and swap, docs/operations.md "Scale"). The cells are not touched: a stored
number no double holds reads as blank through the new key, as it did not fit before
either. Running it again changes nothing: an index already of the new form, or missing,
is left alone.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from storage.migrations._value_indexes import rebuild_value_indexes
from storage.schema import ColumnMeta, ColumnType


def _number_formula(r: Any) -> ColumnMeta | None:
    kind = ColumnType(r["type"])
    if not kind.computed:
        return None
    return ColumnMeta(id=int(r["id"]), table_id=int(r["table_id"]), name="", type=kind, value_type="number")


def upgrade(conn: Connection) -> None:
    rebuild_value_indexes(conn, "c.value_type = 'number'", _number_formula)
