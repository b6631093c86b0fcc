"""What `thaw up` (activator) and `thaw serve` (runtime) must agree on over the wire, once.

One concept per module; import each by its module name (e.g. `thawwire.pool_protocol`).
"""

from __future__ import annotations

__all__: list[str] = []
