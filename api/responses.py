"""A fast JSON response (orjson) used by every route."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse

from storage import jsontext


class JSON(JSONResponse):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return jsontext.dumps(content, option=orjson.OPT_NON_STR_KEYS)
