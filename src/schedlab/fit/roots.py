"""Root finding that fails in one line: Brent's method on a bracket that is checked first.

:func:`bracketed_root` evaluates the function at both ends of its interval; when either value is
not a number, or both have the same sign, the target cannot be reached within the interval, and
the caller's ``unreachable`` says, from the two values, which input makes it so and what range
would work. Each end is evaluated once (Brent's method asks for both ends first): a function that
runs a simulation costs no more than without the check.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.optimize import brentq

from schedlab.errors import SchedlabError


def bracketed_root(f: Callable[[float], float], lo: float, hi: float, *, unreachable: Callable[[float, float], str],
                   xtol: float = 2e-12) -> float:
    """The root of ``f`` in ``[lo, hi]`` (Brent's method, ``xtol``); a :class:`SchedlabError`
    with ``unreachable(f(lo), f(hi))`` when ``f`` is not finite at an end or does not change
    sign between them."""
    seen: dict[float, float] = {}

    def once(x: float) -> float:
        if x not in seen:
            seen[x] = float(f(x))
        return seen[x]

    at_lo, at_hi = once(lo), once(hi)
    if not (np.isfinite(at_lo) and np.isfinite(at_hi)) or at_lo * at_hi > 0:
        raise SchedlabError(unreachable(at_lo, at_hi))
    return float(brentq(once, lo, hi, xtol=xtol))
