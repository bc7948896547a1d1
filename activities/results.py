"""A step's results within what Temporal carries (one payload: 2 MiB at most).

Every step activity's result goes back to its workflow as one Temporal payload, which
Temporal refuses over its 2 MiB blob-size limit (``TMPRL1103``: the workflow task fails
again and again, the run hanging until its budget). :func:`fit_result` keeps a result
within :data:`~activities.proxy.STEP_RESULT_MAX_BYTES`: remote steps (responses), formula
and parser steps (values) and record steps alike.
"""

from __future__ import annotations

from typing import Any

from temporalio.converter import PayloadConverter

from activities.ledger import size_text
from activities.proxy import STEP_RESULT_MAX_BYTES
from activities.types import StepResult

_PAYLOADS = PayloadConverter.default  # the worker's converter (no custom one is configured)
NOUNS = ("response", "value", "result")  # what a step hands back, as its errors name it


def json_size(value: Any) -> int:
    """Bytes of ``value`` as a Temporal payload's data (JSON, non-ASCII escaped)."""
    return len(_PAYLOADS.to_payloads([value])[0].data)



def _not_kept(size: int, noun: str = "response") -> str:
    return (f"{noun} of {size_text(size)} not kept: the {noun}s of one run of a step may total at most"
            f" {size_text(STEP_RESULT_MAX_BYTES)}; run this record alone or in a smaller batch")


def _too_large(noun: str = "response") -> str:
    return f"{noun} larger than {size_text(STEP_RESULT_MAX_BYTES)} as JSON, the most a step keeps"


_MESSAGE_MAX = max(max(len(_too_large(n)), len(_not_kept(1023 * 1024, n)), len(_not_kept(STEP_RESULT_MAX_BYTES, n)))
                   for n in NOUNS) + 2


def fit_share(result: StepResult, max_bytes: int | None, noun: str) -> StepResult:
    """``result`` within ``max_bytes`` (a share of what a step may hand back): the records
    whose values are past it go to ``over`` (run again on their own share), not failed;
    within :func:`fit_result` when ``max_bytes`` is None or not below the whole limit."""
    if max_bytes is None or max_bytes >= STEP_RESULT_MAX_BYTES:
        return fit_result(result, noun)
    if json_size(result) <= max_bytes:
        return result
    out = StepResult(errors=dict(result.errors), children=result.children)
    used = json_size(out) + json_size(list(result.values))  # room for every id in "over"
    for rid, value in result.values.items():
        size = json_size(rid) + 2 + json_size(value)
        if not out.over and used + size <= max_bytes:
            out.values[rid] = value
            used += size
        else:  # in record order: every record after the first left out goes too
            out.over.append(rid)
    return out


def fit_result(result: StepResult, noun: str = "response") -> StepResult:
    """``result`` within :data:`~activities.proxy.STEP_RESULT_MAX_BYTES` as Temporal encodes it.

    Values are kept in record order while they fit, with room left for the error of each
    record after them; one that does not fit becomes its record's step error saying so
    (``noun``: what the step hands back) — alone too large as JSON, or too large beside the
    run's other records (that record alone, or a smaller batch, fits).
    """
    if json_size(result) <= STEP_RESULT_MAX_BYTES:
        return result
    out = StepResult(errors=dict(result.errors), children=result.children)
    used = json_size(out)
    alone = STEP_RESULT_MAX_BYTES - json_size(StepResult())
    keys = {rid: json_size(rid) + 2 for rid in result.values}  # "rid": and a comma
    reserve = sum(k + _MESSAGE_MAX for k in keys.values())  # every record after this one dropped
    for rid, value in result.values.items():
        reserve -= keys[rid] + _MESSAGE_MAX
        size = json_size(value)
        if used + keys[rid] + size + reserve <= STEP_RESULT_MAX_BYTES:
            out.values[rid] = value
            used += keys[rid] + size
            continue
        message = _too_large(noun) if keys[rid] + size > alone else _not_kept(size, noun)
        out.errors[rid] = message
        used += keys[rid] + json_size(message)
    return out
