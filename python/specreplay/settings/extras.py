"""Optional extras (`pip install 'specreplay[ray]'`): whether one a setting
asks for is installed, checked with the options before anything starts."""

from __future__ import annotations

import importlib.util

from specreplay.errors import ConfigError

#: The one line a user without Ray sees.
INSTALL_HINT = "--ray needs Ray: pip install 'specreplay[ray]'"


def require_ray() -> None:
    """A ConfigError saying how to install Ray when it is not installed
    (checked with the options, before anything starts; imports nothing)."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(INSTALL_HINT)
