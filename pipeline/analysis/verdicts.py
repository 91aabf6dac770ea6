"""The verdicts of the registered claims and the rules that combine them, stated before the data: the
light half of the claims machinery (no numpy, no pandas), which the workflow reads at parse time
through pipeline/analysis/claims.py."""

from __future__ import annotations

import math

LEVEL = 0.95
POWER = 0.8  # the power at which a not-established claim states its detectable effect
P_U = 0.95  # a U is established when P(U) exceeds this (pipeline/analysis/inflection.py)

SUPPORTED, NOT_ESTABLISHED, CONTRADICTED = "supported", "not established", "contradicted"
NOT_REACHED = "not reached within the budgets"  # a U claim whose curve still falls at its end
NOT_COMPUTED = "not computed"


class NoRows(LookupError):
    """A claim's rows are not in the study: the claim renders as not computed, naming them."""


def interval_verdict(low: float, high: float, sign: int) -> str:
    """The rule for a claimed direction (`sign` +1: above 0, -1: below): supported when the whole
    interval lies on the claimed side of 0, contradicted when it lies on the other side, otherwise
    (or without an interval) not established."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_ESTABLISHED
    if sign * low > 0 and sign * high > 0:
        return SUPPORTED
    if sign * low < 0 and sign * high < 0:
        return CONTRADICTED
    return NOT_ESTABLISHED


def _settled(verdicts: list[str]) -> list[str] | str:
    """The computed verdicts, or NOT_COMPUTED when there are none."""
    computed = [v for v in verdicts if v != NOT_COMPUTED]
    return computed or NOT_COMPUTED


def all_of(verdicts: list[str]) -> str:
    """A claim made of several settings, each of which must hold: supported when all are (and all
    were computed), contradicted when all are, not reached when each is contradicted or not reached,
    not computed when none was, otherwise not established."""
    computed = _settled(verdicts)
    if computed == NOT_COMPUTED:
        return NOT_COMPUTED
    if len(computed) == len(verdicts) and len(set(computed)) == 1:
        return computed[0]
    if len(computed) == len(verdicts) and set(computed) <= {CONTRADICTED, NOT_REACHED}:
        return NOT_REACHED
    return NOT_ESTABLISHED


def any_of(verdicts: list[str]) -> str:
    """A claim that holds where at least one setting does (each setting's test made at the
    Bonferroni level by its caller): supported when any is, contradicted when every computed one
    is, not reached when each computed one is contradicted or not reached, not computed when none was."""
    computed = _settled(verdicts)
    if computed == NOT_COMPUTED:
        return NOT_COMPUTED
    if SUPPORTED in computed:
        return SUPPORTED
    if set(computed) == {CONTRADICTED}:
        return CONTRADICTED
    if set(computed) <= {CONTRADICTED, NOT_REACHED}:
        return NOT_REACHED
    return NOT_ESTABLISHED
