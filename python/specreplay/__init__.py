"""specreplay: replay LLM request traces against inference servers, measured in Rust."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from specreplay.errors import ConfigError, EngineError, InvalidRunError, ResultsError, SpecreplayError, StreamFormatError, TraceError

if TYPE_CHECKING:
    from specreplay._core import __version__
    from specreplay.comparison import compare
    from specreplay.replay import replay
    from specreplay.results import load
    from specreplay.summary import summarize

#: The public names that need the extension, pandas or pyarrow: imported on
#: first use (PEP 562), so that `import specreplay.cli` (every command,
#: `--help` first) does not pay for them.
_LAZY = {
    "__version__": "specreplay._core",
    "compare": "specreplay.comparison",
    "replay": "specreplay.replay",
    "load": "specreplay.results",
    "summarize": "specreplay.summary",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'specreplay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # Importing the submodule `specreplay.replay` sets the package's
        # `replay` to it; the name belongs to the function.
        if name == "replay" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "ConfigError",
    "EngineError",
    "InvalidRunError",
    "ResultsError",
    "SpecreplayError",
    "StreamFormatError",
    "TraceError",
    "__version__",
    "compare",
    "load",
    "replay",
    "summarize",
]
