"""Distributed replay on Ray (`replay --ray [ADDRESS] --workers N`): one
sweep point shared by N workers, each a Ray actor running the Rust engine
exactly as a local replay does, their rows merged into one results file.

One job per module:
- `split`: which worker sends which request (pure functions);
- `clock`: each worker's clock offset against the driver, NTP-style;
- `worker`: the Ray actor around `_core.start_point`;
- `driver`: starts the workers, gives them the start instant, drains their
  rows (Arrow record batches, one per drain, never per chunk) and accounts
  for a worker that is lost.

Ray is an optional dependency (`pip install 'specreplay[ray]'`): only
`driver` and `worker` import it, and only when a run asks for it.
"""

from __future__ import annotations

from typing import Any

from specreplay.errors import ConfigError
from specreplay.settings.extras import INSTALL_HINT

def import_ray() -> Any:
    """The `ray` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return ray
