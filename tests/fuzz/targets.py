"""How the fuzz targets run: one property, two budgets (a bounded CI run, a `slow` long run).

`fuzz_target(*strategies)` turns a property into a pair of pytest tests sharing its body: the
CI one runs `CI_EXAMPLES` examples, the `slow`-marked one `LONG_EXAMPLES` (`make test-slow`).
Each example has a deadline (`DEADLINE_MS`, generous for a loaded two-core machine): a decoder
that spins on some input fails the test instead of hanging the suite. The CI run keeps no
example database (nothing written into the tree); the long run keeps hypothesis's default one,
so a failure found there is replayed first on the next long run.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

__all__ = [
    "CI_EXAMPLES",
    "DEADLINE_MS",
    "LONG_EXAMPLES",
    "LONG_TIMEOUT_S",
    "fuzz_target",
    "json_values",
]

CI_EXAMPLES = 150
LONG_EXAMPLES = 5_000
LONG_TIMEOUT_S = 1_800  # pytest-timeout's 120 s is for one ordinary test, not 5,000 examples
DEADLINE_MS = 2_000

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]


def fuzz_target(
    *strategies: st.SearchStrategy[Any],
    deadline_ms: int = DEADLINE_MS,
) -> Callable[[Callable[..., None]], tuple[Callable[..., None], Callable[..., None]]]:
    """(the CI test, the long `slow` test) of one property over `strategies`, each example
    within `deadline_ms` (a target whose examples are real round trips may take longer)."""
    deadline = timedelta(milliseconds=deadline_ms)
    ci_run = settings(
        max_examples=CI_EXAMPLES, deadline=deadline, database=None, suppress_health_check=_HEALTH
    )
    long_run = settings(
        max_examples=LONG_EXAMPLES, deadline=deadline, suppress_health_check=_HEALTH
    )

    def pair(body: Callable[..., None]) -> tuple[Callable[..., None], Callable[..., None]]:
        ci = ci_run(given(*strategies)(body))
        long = pytest.mark.slow(
            pytest.mark.timeout(LONG_TIMEOUT_S)(long_run(given(*strategies)(body)))
        )
        return ci, long

    return pair


# Any JSON value, nested a few levels: what a hostile client can put in any field.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
