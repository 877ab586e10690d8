"""pandas imported when a replay first needs it, after its first request.

pandas is a third of a replay's start-up CPU (docs/benchmarks.md,
"Start-up"), and nothing before the first request needs it: the trace scan,
the preflight, the opening metrics scrape and the request batches are
pyarrow and the extension, and the modules on that path import the analysis
(pandas) where they use it. pyarrow, though, imports pandas on its first
conversion of Python values (`pa.scalar(x, type)`, `RecordBatch.from_pylist`),
when its pandas shim (`pyarrow.lib._pandas_api`) looks once whether pandas is
there, to tell pandas objects apart.

`defer()` has the shim look while `import pandas` fails, so it records "no
pandas", and then watches for pandas: when anything imports it later (the
first point's analysis, or pyarrow inferring the type of untyped values),
the shim is told as soon as the module has run (`shim.pd` looks again), and
from then on pyarrow converts pandas objects as it always does. Until then no
pandas object can exist, so the shim's answer changes nothing. Typed
conversions, the only ones before the first request, never import pandas
otherwise. With a pyarrow whose shim is not where this looks, `defer()`
does nothing (pandas is then imported at the first conversion, as before).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    # The finders and the loader below follow the import protocols without
    # subclassing importlib.abc: importing it (and importlib.resources with
    # it) cost 3 ms of the replay's CPU before its first send.
    import importlib.abc
    import importlib.machinery


def _shim() -> Any:
    import pyarrow.lib

    return getattr(pyarrow.lib, "_pandas_api", None)


def defer() -> bool:
    """Returns whether it did anything: not when pandas is already imported,
    or pyarrow's shim has already looked for it or is not there."""
    shim = _shim()
    # hasattr on the type: on the instance, the property would look for pandas.
    if "pandas" in sys.modules or shim is None or not hasattr(type(shim), "have_pandas"):
        return False
    blind = _NoPandas()
    sys.meta_path.insert(0, blind)
    try:
        found = shim.have_pandas  # the shim's one look
    finally:
        sys.meta_path.remove(blind)
    if found:  # it had looked before (pandas imported and unloaded?): nothing to undo later
        return False
    sys.meta_path.insert(0, _TellPyarrow())
    return True


def deferred() -> bool:
    """Whether `defer()` is in force: pandas not imported yet, and pyarrow's
    shim to be told when it is."""
    return "pandas" not in sys.modules and any(isinstance(finder, _TellPyarrow) for finder in sys.meta_path)


class _NoPandas:
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "pandas":
            raise ImportError("pandas: deferred (specreplay.run.pandas_later)", name="pandas")
        return None


class _TellPyarrow:
    """Finds pandas as the finders after it do, and once its module has run,
    has pyarrow's shim look again, which now finds it."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "pandas":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = cast("importlib.abc.Loader", _ThenTellPyarrow(spec.loader))  # a Loader by protocol
        return spec


class _ThenTellPyarrow:
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _shim().pd  # noqa: B018  # the shim looks again and finds pandas

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, …
        return getattr(self.loader, name)
