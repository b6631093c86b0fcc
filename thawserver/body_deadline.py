"""What both servers answer a request body that does not arrive in time: 408 Request Timeout,
`{"error": "request body did not arrive within <N> s"}` (docs/decisions/0015).

`thaw serve` and `thaw up` each cut a body off at their `--body-timeout-s` (their own error
classes carry `BODY_TIMEOUT_STATUS`); the shared-memory register body (thawserver.shm_api) too.
"""

from __future__ import annotations

__all__ = ["BODY_TIMEOUT_STATUS", "body_timeout_message"]

# HTTP's "the server did not receive a complete request message within the time that it was
# prepared to wait" (RFC 9110 §15.5.9); tritonclient raises it as InferenceServerException
# with status "408" and the body's error text.
BODY_TIMEOUT_STATUS = 408


def body_timeout_message(timeout_s: float) -> str:
    """The error text of a body cut off after `timeout_s` seconds."""
    return f"request body did not arrive within {timeout_s:g} s"
