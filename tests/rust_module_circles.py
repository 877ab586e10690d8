"""No import circle between the Rust core's modules: `make lint` runs this on
rust/specreplay-core/src (docs/architecture.md, "The Rust modules").

Why our own check: clippy has no lint for module cycles, and the one
well-kept tool that finds them (`cargo modules dependencies --acyclic`)
builds on rust-analyzer's crates — minutes of compiling on CI's 2 cores for
a check this small. This reads the source as text instead:

- every file is a module (`src/x.rs` or `src/x/mod.rs` is `x`, `src/x/y.rs`
  is `x::y`), inline `mod tests { … }` blocks belong to their file;
- a module uses another where it names it by path: `crate::a::b`,
  `super::a`, `self::a` (in `use` lines, `{…}` groups and code alike),
  and `crate::Name` re-exported by `lib.rs` (`pub use error::CoreError`)
  counts as its module;
- within each module that has children, the children are siblings: a
  sibling using another (directly or through any module below either) is
  an arrow, and a circle of arrows between siblings fails. The crate root's
  children (`decode`, `error`, `engine`, `sim`, …) are one such set, the
  children of `sim` another, and so on down.

Comments and string literals are left out before reading. A path written by
a macro, or reaching a module only through a glob re-export, is not seen.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

Module = tuple[str, ...]

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# Strings: plain and raw (r"…", r#"…"#); a char literal holding a quote.
_STRING = re.compile(r'r(#*)".*?"\1|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'', re.S)
_PATH = re.compile(r"\b(crate|super|self)((?:::super)*)::(\{|[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)")
_REEXPORT = re.compile(r"\bpub(?:\([a-z]+\))?\s+use\s+([a-z_][a-z0-9_]*)::([^;]+);")


def _code(text: str) -> str:
    return _STRING.sub('""', _COMMENT.sub(" ", text))


def module_of(src: Path, file: Path) -> Module:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def _group(text: str, start: int) -> list[str]:
    """The first names of each item of the `{…}` group opening at `start`."""
    depth, item, items = 0, "", []
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                items.append(item)
                break
        if ch == "," and depth == 1:
            items.append(item)
            item = ""
        elif depth >= 1:
            item += ch
    names = []
    for entry in items:
        match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", entry)
        if match:
            names.append(match.group(1))
    return names


def references(module: Module, text: str) -> list[tuple[Module, list[str]]]:
    """(base module, names after it) of every `crate::`/`super::`/`self::` path in `text`."""
    out = []
    code = _code(text)
    for match in _PATH.finditer(code):
        head, supers, rest = match.group(1), match.group(2), match.group(3)
        if head == "crate":
            base: Module = ()
        else:
            # A file module `a/b.rs` and a directory module `a/b/mod.rs` are both `a::b`: super is `a`.
            base = module if head == "self" else module[:-1]
            base = base[: len(base) - supers.count("super")]
        if rest == "{":
            for name in _group(code, match.end() - 1):
                out.append((base, [name]))
        else:
            out.append((base, rest.split("::")))
    return out


def resolve(base: Module, names: list[str], modules: set[Module], reexports: dict[Module, dict[str, Module]]) -> Module:
    """The deepest module that `base::names…` reaches."""
    at = base
    for name in names:
        if at + (name,) in modules:
            at = at + (name,)
        elif name in reexports.get(at, {}):
            return reexports[at][name]
        else:
            break
    return at


def arrows(src: Path) -> dict[Module, set[Module]]:
    """Module -> the modules it uses (each the deepest module its paths reach)."""
    files = {module_of(src, f): f for f in sorted(src.rglob("*.rs"))}
    modules = set(files)
    reexports: dict[Module, dict[str, Module]] = defaultdict(dict)
    for module, file in files.items():
        for match in _REEXPORT.finditer(_code(file.read_text(encoding="utf-8"))):
            child = module + (match.group(1),)
            if child not in modules:
                continue
            items = match.group(2).strip()
            names = _group(items, 0) if items.startswith("{") else [re.split(r"::|\s", items)[-1]]
            for name in names:
                reexports[module][name] = child
    out: dict[Module, set[Module]] = defaultdict(set)
    for module, file in files.items():
        text = file.read_text(encoding="utf-8")
        for base, names in references(module, text):
            target = resolve(base, names, modules, reexports)
            if target != module:
                out[module].add(target)
    return out


def sibling_circles(src: Path) -> list[list[str]]:
    """Every circle between sibling modules, each as the `::` names of its members."""
    uses = arrows(src)
    modules = {module_of(src, f) for f in src.rglob("*.rs")}
    parents = {m[:-1] for m in modules if m}
    circles = []
    for parent in sorted(parents):
        depth = len(parent)
        children = sorted({m[: depth + 1] for m in modules if len(m) > depth and m[:depth] == parent})
        graph: dict[Module, set[Module]] = {c: set() for c in children}
        for importer, targets in uses.items():
            if len(importer) <= depth or importer[:depth] != parent:
                continue
            a = importer[: depth + 1]
            for t in targets:
                if len(t) > depth and t[:depth] == parent and t[: depth + 1] != a:
                    graph[a].add(t[: depth + 1])
        for component in _strong_components(graph):
            if len(component) > 1:
                circles.append(sorted("::".join(m) for m in component))
    return circles


def _strong_components(graph: dict[Module, set[Module]]) -> list[list[Module]]:
    """Tarjan's strongly connected components."""
    index: dict[Module, int] = {}
    low: dict[Module, int] = {}
    stack: list[Module] = []
    on_stack: set[Module] = set()
    out: list[list[Module]] = []

    def visit(v: Module) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    src = Path(argv[1] if len(argv) > 1 else "rust/specreplay-core/src")
    circles = sibling_circles(src)
    for circle in circles:
        print(f"import circle between Rust modules of {src}: {' <-> '.join(circle)}", file=sys.stderr)
    if not circles:
        print(f"no import circle between the modules of {src}")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
