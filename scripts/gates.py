#!/usr/bin/env python3
"""The source gates of the test script: fast, no build needed.

    python3 scripts/gates.py [--root DIR] [all|lines|functions|cycles|sql-states|migrations|crate-deps|closed-crates]

Each gate prints one line per offence, naming the file(s), and the script
exits 1 when any gate fails (0 when all pass). `scripts/gates_test.py`
runs each gate on small fixture trees to show that it fails when it must.

**lines** - no production Rust file over 700 lines. Counted as the
project's before-stop hook counts: the lines before the first line that
starts with `#[cfg(test)]`, in every `.rs` file of the tree but those under
the top-level `tests/` (and `target/`, `.git/`). Test files kept beside the
code (`foo_tests.rs`) count as the hook counts them.

**functions** - no production Rust function over 150 lines. Every `fn`
item (free functions, methods, nested fns) whose `fn` keyword stands in
the production part of a file the **lines** gate counts (before the
file's inline `#[cfg(test)] mod NAME {`: a `#[cfg(test)] mod NAME;`
declaration above production code does not end it) is measured from its
`fn` line to the line of its body's closing brace, both counted. The
body's braces are matched in the code without comments and string, raw
string and char literals; a brace inside the signature's parentheses
(a destructured parameter) is not the body; a `fn` with no body (a trait
method's declaration) is not measured. Limits: functions made by macros
are not read.

**cycles** - no import cycle between modules, nor between the files of a
module, in any crate. A crate is a directory with a `Cargo.toml` and
`src/lib.rs` or `src/main.rs`; its module tree is read from the `mod NAME;`
declarations, from the crate root down (`#[path]` followed), leaving out
`#[cfg(test)]` modules. In each module's own file (`lib.rs`, `mod.rs`,
`foo.rs`), the code before its `#[cfg(test)]` module, without comments and
string literals, is read for paths:
- every `use` declaration (trees with braces, `self`, `as`, `*`);
- every path in the code that starts with `crate::`, `super::` or `self::`.
A path is resolved down the module tree; where it names an item that a
module imports (`use`, `pub use`, or a glob whose target declares or
imports the name), the import is followed to where the item is declared,
so a re-export does not hide an edge. A path named in module `a::c::y`
that resolves to module `a::b::x` is an edge `c -> b` between the
children of `a`, their lowest common ancestor: the graph of each module
is between its children (files and sub-modules, each with everything
below it). A module's own file is their parent, not
a sibling: a child naming its parent's items, or the parent naming a
child's, is no edge. Every strongly connected component of more than one
child is a failure: at the crate root a cycle between modules, below it a
cycle between the files of a module.
Limits: paths made by macros, inline `mod x { }` blocks (read as part of
their file), names brought in by a glob and used bare (the glob itself is
an edge to its target), and `[lib]`/`[[bin]]` paths set in `Cargo.toml`
are not read; a crate's dependencies on other crates are Cargo's to keep
acyclic.

**sql-states** - no stored state spelled as an SQL literal outside the
engine's state mapping. The stored names are read from the mapping's
sources (`STATE_SOURCES`): every `=> "name"` match arm in them (the
`as_str` of `BuildStatus`, `WorkerState`, `HandleState`, `ArtifactKind`,
`Direction`, ...). Every string literal of a production file (as for
**cycles**: the module tree's files, before their `#[cfg(test)]` module)
that reads as SQL (holds an upper-case SQL keyword: SELECT, INSERT,
UPDATE, DELETE, WHERE, SET, VALUES, AND, OR, IN, CASE, WHEN, JOIN, ...)
and holds one of those names in single quotes (`'aborted'`) is a failure,
unless its file is the mapping itself (`STATE_MAPPING`). Statements bind a
state (`.bind(BuildStatus::Aborted.as_str())`) or compose a list made
from the enum by the mapping. Migrations (`.sql` files) are the schema
and are not read.

**migrations** - one migrations tree (`MIGRATIONS`): a migration both
dialects run is one shared file, `migrations/VERSION_NAME.sql`; a pair
`migrations/sqlite/VERSION_NAME.sql` + `migrations/postgres/VERSION_NAME.sql`
exists only where the dialects' SQL differs. A pair whose two files are
byte-identical fails (it is one shared file: moving it keeps its sqlx
checksum), and so does a version held by one dialect alone, by a shared
file and a dialect's, by two files of one directory, or by a pair whose
names differ. (`actors/build.rs` refuses the last four too; this gate
names them without a build.)
**crate-deps** - no crate lists a dependency it must not have
(`FORBIDDEN_DEPS`: the agent client does not depend on the agent, what
both ends of the agent's HTTP API share being `gantry-wire`'s; nor does
the Kubernetes runtime, which shares the beacon and the sweeper through
`gantry-worker-common`; nor does the pipeline language on sqlx, actix or
the engine). Every
dependency table of the crate's `Cargo.toml` is read (`dependencies`,
`dev-dependencies`, `build-dependencies` and their `target.*` forms), by
key and by a renaming `package = "..."`, so a test-only or renamed
dependency is refused too.

**closed-crates** - a closed crate's root declares no public module but
those it names (`CLOSED_CRATES`): the agent's modules are all private and
what other crates use is re-exported at its root (`pub use`), its one
door (its test helpers, `testing`, behind their feature, aside); the
engine's door is `api` (and `testing`). Read from the crate root's code
without comments and string literals: every `pub mod NAME` (inline or
not, whatever its attributes) whose name is not listed fails;
`pub(crate) mod` and `mod` are private. A `pub use` of a module is not
told from one of an item, and is not read. And a door re-exports nothing
that `SEALED` keeps inside its crate: the engine's `api.rs` (its `bench`
module included) no `Db` and not the `db` module, by any `pub use` (a
brace, an `as`, a glob of `db`), so no edge holds the database layer.
"""
import argparse
import os
import re
import sys
import tomllib
from collections import defaultdict

# Where the stored names of states are declared (their `as_str` arms).
STATE_SOURCES = ("wire/src/state.rs", "actors/src/db/states.rs")
# The engine's state mapping: the one file that may spell them in SQL.
STATE_MAPPING = ("actors/src/db/states.rs",)
MAX_LINES = 700
# The longest production function, in lines, `fn` line to closing brace.
MAX_FN_LINES = 150
# The migrations tree: shared files at its top, each dialect's own below.
MIGRATIONS = "migrations"
DIALECTS = ("sqlite", "postgres")
# Crates (their `Cargo.toml`) and the packages they must not depend on.
FORBIDDEN_DEPS = {
    "adapters/agent-client/Cargo.toml": ("gantry-agent",),
    # The Kubernetes runtime shares the beacon and the sweeper through
    # gantry-worker-common, not the agent.
    "adapters/kubernetes/Cargo.toml": ("gantry-agent",),
    # The pipeline language is read without a database or the engine
    # (`gantry validate-plan`); the root crate's `validate_plan` test
    # checks its whole dependency tree with `cargo tree`.
    "language/Cargo.toml": ("sqlx", "gantry-actors", "actix", "actix-web"),
}
SKIP_DIRS = {"target", ".git", "node_modules"}


# ---------------------------------------------------------------- lexing


def lex(text):
    """`text` with comments blanked (`strings`) and with comments and string
    literals' contents blanked (`code`), both keeping every line break and
    offset; and the string literals as (line, content)."""
    keep = list(text)  # comments blanked
    code = list(text)  # comments and strings blanked
    literals = []
    n = len(text)
    i = 0
    line = 1

    def blank(buf, a, b):
        for k in range(a, b):
            if buf[k] != "\n":
                buf[k] = " "

    def ident_char(c):
        return c.isalnum() or c == "_"

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(keep, i, j)
            blank(code, i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(keep, i, j)
            blank(code, i, j)
            line += text.count("\n", i, j)
            i = j
        elif c == "r" and (i == 0 or not ident_char(text[i - 1]) or text[i - 1] == "b") and re.match(
            r'r#*"', text[i:]
        ):
            # A raw string: r"..." or r#"..."#.
            hashes = len(re.match(r"r(#*)", text[i:]).group(1))
            start = i + 1 + hashes + 1
            end = text.find('"' + "#" * hashes, start)
            end = n if end < 0 else end
            literals.append((line, text[start:end]))
            blank(code, start, end)
            line += text.count("\n", i, end)
            i = min(n, end + 1 + hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            literals.append((line, text[i + 1 : j]))
            blank(code, i + 1, j)
            line += text.count("\n", i, j)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}') or a lifetime/label ('a).
            if text.startswith("\\", i + 1):
                j = text.find("'", i + 3)
                j = n if j < 0 else j
                blank(code, i + 1, j)
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'":
                blank(code, i + 1, i + 2)
                i += 3
            else:
                i += 1
        elif c == "b" and re.match(r'br#*"', text[i:]) and (i == 0 or not ident_char(text[i - 1])):
            i += 1  # a byte raw string: read from its `r`
        elif ident_char(c):
            j = i + 1
            while j < n and ident_char(text[j]):
                j += 1
            i = j
        else:
            i += 1
    return "".join(keep), "".join(code), literals


TEST_MOD = re.compile(
    r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{"
)


def production_cut(code):
    """The offset of the file's inline `#[cfg(test)] mod tests { }` (its
    end when none); `#[cfg(test)] mod x;` declarations are left out where
    the modules are read."""
    m = TEST_MOD.search(code)
    return m.start() if m else len(code)


# ---------------------------------------------------------------- files


def rust_files(root):
    """Every `.rs` file under `root` (relative paths), but `tests/` at the
    top and build output."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and not (rel_dir == "." and d == "tests")
        )
        for name in sorted(files):
            if name.endswith(".rs"):
                out.append(os.path.normpath(os.path.join(rel_dir, name)))
    return out


def gate_lines(root):
    """Files over MAX_LINES lines before their first `#[cfg(test)]` line."""
    failures = []
    for rel in rust_files(root):
        count = 0
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for text_line in f:
                if text_line.startswith("#[cfg(test)]"):
                    break
                count += 1
        if count > MAX_LINES:
            failures.append(
                f"{rel}: {count} lines of production code (over {MAX_LINES}): split it by concept"
            )
    return failures


FN_ITEM = re.compile(r"\bfn\s+(r#)?([A-Za-z_]\w*)")


def fn_spans(code):
    """Every `fn` item of `code` (comments and literals blanked) with a
    body, as (name, offset of `fn`, offset of the body's closing brace)."""
    out = []
    n = len(code)
    for m in FN_ITEM.finditer(code):
        # The body's opening brace: the first `{` outside the signature's
        # parentheses and brackets; a `;` first means no body.
        depth, i, start = 0, m.end(), None
        while i < n:
            c = code[i]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0 and c == ";":
                break
            elif depth == 0 and c == "{":
                start = i
                break
            i += 1
        if start is None:
            continue
        depth, i = 0, start
        while i < n:
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out.append((m.group(2), m.start(), min(i, n - 1)))
    return out


def gate_functions(root):
    """Production functions over MAX_FN_LINES lines, `fn` line to closing brace."""
    failures = []
    for rel in rust_files(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        _, code, _ = lex(text)
        cut = production_cut(code)
        for name, at, end in fn_spans(code):
            if at >= cut:
                continue
            first = code.count("\n", 0, at) + 1
            count = code.count("\n", at, end) + 1
            if count > MAX_FN_LINES:
                failures.append(
                    f"{rel}:{first} fn {name}: {count} lines (over {MAX_FN_LINES}): split it by step"
                )
    return failures


# ---------------------------------------------------------------- module trees


class Module:
    """One module with a file of its own."""

    def __init__(self, path, file):
        self.path = path  # tuple of segments below the crate root
        self.file = file  # relative to the tree's root
        self.children = set()
        self.uses = defaultdict(list)  # bound name -> raw paths
        self.globs = []  # raw paths of `use x::*`
        self.items = set()
        self.refs = []  # raw paths named in the code (uses and inline)
        self.literals = []  # (line, text) of production string literals


MOD_DECL = re.compile(
    r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(?:r#)?(\w+)\s*;"
)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]*)"\]')
USE = re.compile(r"(?<![\w$])use\s+([^;]*);")
INLINE = re.compile(r"(?<![\w$:])((?:crate|super|self)(?:\s*::\s*(?:r#)?\w+)+)")
ITEM = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+(?:r#)?([A-Za-z_]\w*)|macro_rules!\s*(\w+)"
)


def parse_use_tree(text):
    """The (segments, bound name) of one `use` tree; a glob binds `*`."""
    tokens = re.findall(r"::|[{},*]|\w+", text)
    pos = [0]

    def peek():
        return tokens[pos[0]] if pos[0] < len(tokens) else None

    def take():
        t = peek()
        pos[0] += 1
        return t

    def tree(prefix):
        out = []
        if peek() == "::":
            take()
        while True:
            t = peek()
            if t is None:
                return out
            if t == "{":
                take()
                while peek() not in (None, "}"):
                    out += tree(prefix)
                    if peek() == ",":
                        take()
                take()
                return out
            if t == "*":
                take()
                out.append((prefix, "*"))
                return out
            take()
            if peek() == "::":
                take()
                prefix = prefix + [t]
                continue
            # The last segment: bound as itself, `self`'s parent, or `as`.
            if t == "self":
                path, name = prefix, prefix[-1] if prefix else None
            else:
                path, name = prefix + [t], t
            if peek() == "as":
                take()
                name = take()
            if name and name != "_":
                out.append((path, name))
            elif name == "_":
                out.append((path, None))
            return out

    result = []
    while pos[0] < len(tokens):
        before = pos[0]
        result += tree([])
        if peek() == ",":
            take()
        if pos[0] == before:
            pos[0] += 1
    return result


def child_file(parent_file, parent_is_dir_owner, name, path_attr):
    """Where `mod name;` declared in `parent_file` lives (relative paths)."""
    here = os.path.dirname(parent_file)
    if path_attr:
        return os.path.normpath(os.path.join(here, path_attr))
    base = here if parent_is_dir_owner else os.path.join(here, os.path.basename(parent_file)[:-3])
    return os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")


def load_crate(root, crate_root):
    """The modules of the crate whose root file is `crate_root`."""
    modules = {}

    def load(path, rel):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        keep, code, literals = lex(text)
        cut = production_cut(code)
        keep, code = keep[:cut], code[:cut]
        cut_line = code.count("\n") + 1
        module = Module(path, rel)
        module.literals = [(ln, s) for ln, s in literals if ln < cut_line]
        modules[path] = module
        for m in MOD_DECL.finditer(keep):
            attrs, name = m.group(1), m.group(2)
            if re.search(r"#\[cfg\(test\)\]", attrs):
                continue
            attr = PATH_ATTR.search(attrs)
            owner = os.path.basename(rel) in ("mod.rs", "lib.rs", "main.rs")
            where = child_file(rel, owner, name, attr.group(1) if attr else None)
            candidates = [where] if isinstance(where, str) else list(where)
            found = next((c for c in candidates if os.path.isfile(os.path.join(root, c))), None)
            if found is None:
                continue
            module.children.add(name)
            load(path + (name,), found)
        for m in USE.finditer(code):
            for segments, name in parse_use_tree(m.group(1)):
                if not segments:
                    continue
                module.refs.append(segments)
                if name == "*":
                    module.globs.append(segments)
                elif name:
                    module.uses[name].append(segments)
        for m in INLINE.finditer(code):
            module.refs.append(re.findall(r"\w+", m.group(1).replace("r#", "")))
        for m in ITEM.finditer(code):
            module.items.add(m.group(1) or m.group(2))

    load((), crate_root)
    return modules


def resolve(modules, at, segments, seen=None):
    """The module that `segments`, named in module `at`, resolves to; None
    for another crate."""
    seen = set() if seen is None else seen
    key = (at, tuple(segments))
    if key in seen or not segments:
        return None
    seen.add(key)
    first = segments[0]
    if first == "crate":
        cur, rest = (), segments[1:]
    elif first in ("super", "self"):
        cur, rest = at, list(segments)
        while rest and rest[0] in ("super", "self"):
            cur = cur[:-1] if rest[0] == "super" else cur
            rest = rest[1:]
    elif first in modules[at].children:
        cur, rest = at, list(segments)
    elif first in modules[at].uses:
        # A name imported from this crate (`use super::walker; walker::X`).
        local = [u for u in modules[at].uses[first] if u[0] != first]
        targets = [resolve(modules, at, u + segments[1:], seen) for u in local]
        return next((t for t in targets if t is not None), None)
    else:
        return None
    for i, seg in enumerate(rest):
        module = modules.get(cur)
        if module is None:
            return None
        if seg in module.children:
            cur = cur + (seg,)
            continue
        # An item of `cur`: declared there, or imported into it.
        if seg in module.uses and seg not in module.items:
            for u in module.uses[seg]:
                target = resolve(modules, cur, u + rest[i + 1 :], seen)
                if target is not None:
                    return target
            return cur
        if seg not in module.items:
            for g in module.globs:
                g_mod = resolve(modules, cur, g, seen)
                if g_mod is not None and g_mod in modules:
                    inner = modules[g_mod]
                    if seg in inner.items or seg in inner.uses or seg in inner.children:
                        return resolve(modules, g_mod, ["self"] + rest[i:], seen)
        return cur
    return cur


def crates(root):
    """(crate directory, root files) of every crate in the tree."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and not (rel_dir == "." and d == "tests")
        )
        if "Cargo.toml" in files:
            roots = [
                os.path.normpath(os.path.join(rel_dir, "src", f))
                for f in ("lib.rs", "main.rs")
                if os.path.isfile(os.path.join(dirpath, "src", f))
            ]
            if roots:
                out.append((os.path.normpath(rel_dir), roots))
    return out


def crate_graphs(root):
    """For each crate root: its modules, and for each module its children's
    graph {child: {child: [(file, target module)]}}."""
    for crate_dir, roots in crates(root):
        for crate_root in roots:
            modules = load_crate(root, crate_root)
            graphs = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
            for path, module in modules.items():
                for segments in module.refs:
                    target = resolve(modules, path, segments)
                    if target is None:
                        continue
                    common = 0
                    while (
                        common < len(path)
                        and common < len(target)
                        and path[common] == target[common]
                    ):
                        common += 1
                    if common < len(path) and common < len(target):
                        parent = path[:common]
                        graphs[parent][path[common]][target[common]].append(
                            (module.file, "::".join(target))
                        )
            yield crate_dir, crate_root, modules, graphs


def strongly_connected(nodes, edges):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def gate_cycles(root):
    failures, summary = [], []
    for crate_dir, crate_root, modules, graphs in crate_graphs(root):
        for parent in sorted(graphs):
            graph = graphs[parent]
            children = modules[parent].children
            for comp in strongly_connected(children, {k: set(v) for k, v in graph.items()}):
                where = "::".join(parent)
                if parent:
                    head = f"import cycle between the files of module {where} ({modules[parent].file})"
                else:
                    head = f"import cycle between the modules of crate {crate_root}"
                lines = [f"{head}: {', '.join(comp)}"]
                for a in comp:
                    for b in sorted(graph.get(a, ())):
                        if b in comp:
                            file, target = graph[a][b][0]
                            lines.append(f"  {a} -> {b} ({file} names {target})")
                failures.append("\n".join(lines))
        summary.append(f"{crate_root}: {len(modules)} modules")
    return failures, summary


# ---------------------------------------------------------------- SQL states

SQL_WORD = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|WHERE|SET|VALUES|AND|OR|IN|NOT|CASE|WHEN|THEN|JOIN|FROM|RETURNING)\b"
)


def stored_names(root):
    names = set()
    for rel in STATE_SOURCES:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        _, code, _ = lex(text)
        cut = production_cut(code)
        names |= set(re.findall(r'=>\s*"([a-z_][a-z0-9_]*)"', text[:cut]))
    return names


def gate_sql_states(root):
    names = stored_names(root)
    if not names:
        return [f"no stored state names found in {', '.join(STATE_SOURCES)}"], names
    quoted = re.compile(r"'(" + "|".join(sorted(map(re.escape, names))) + r")'")
    failures = []
    seen_files = set()
    for _, _, modules, _ in crate_graphs(root):
        for module in modules.values():
            if module.file in seen_files or module.file in STATE_MAPPING:
                continue
            seen_files.add(module.file)
            for line, text in module.literals:
                if not SQL_WORD.search(text):
                    continue
                for m in quoted.finditer(text):
                    failures.append(
                        f"{module.file}:{line}: the state {m.group(0)} spelled in SQL: "
                        f"bind it or use the engine's state mapping ({', '.join(STATE_MAPPING)})"
                    )
    return failures, names


# ---------------------------------------------------------------- migrations


def migration_files(directory):
    """{version: [file names]} of the `.sql` files of `directory` (none when
    it is absent); the version is what precedes the first `_`."""
    out = defaultdict(list)
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            if name.endswith(".sql") and os.path.isfile(os.path.join(directory, name)):
                out[name.split("_", 1)[0]].append(name)
    return out


def gate_migrations(root):
    top = os.path.join(root, MIGRATIONS)
    shared = migration_files(top)
    own = {d: migration_files(os.path.join(top, d)) for d in DIALECTS}
    failures = []

    def rel(*parts):
        return "/".join((MIGRATIONS,) + parts)

    for where, files in [(None, shared)] + [(d, own[d]) for d in DIALECTS]:
        for version, names in sorted(files.items()):
            if len(names) > 1:
                paths = ", ".join(rel(*filter(None, (where, n))) for n in names)
                failures.append(f"{paths}: one version, several files")
    versions = set(shared) | set().union(*(set(own[d]) for d in DIALECTS))
    pairs = 0
    for version in sorted(versions):
        held = [d for d in DIALECTS if version in own[d]]
        if not held:
            continue
        if version in shared:
            failures.append(
                f"{', '.join(rel(d, own[d][version][0]) for d in held)}: version {version} is also "
                f"the shared {rel(shared[version][0])}: keep one or the other"
            )
            continue
        if len(held) < len(DIALECTS):
            missing = [d for d in DIALECTS if d not in held]
            failures.append(
                f"{rel(held[0], own[held[0]][version][0])}: no {'/'.join(missing)} twin: a migration "
                f"is one shared file ({rel(own[held[0]][version][0])}) or a pair, one per dialect"
            )
            continue
        names = {own[d][version][0] for d in DIALECTS}
        if len(names) > 1:
            failures.append(
                f"{', '.join(rel(d, own[d][version][0]) for d in DIALECTS)}: a pair is named alike"
            )
            continue
        (name,) = names
        texts = set()
        for d in DIALECTS:
            with open(os.path.join(top, d, name), "rb") as f:
                texts.add(f.read())
        if len(texts) == 1:
            failures.append(
                f"{', '.join(rel(d, name) for d in DIALECTS)}: identical: make them one shared "
                f"file, {rel(name)} (the same bytes keep the same checksum)"
            )
            continue
        pairs += 1
    return failures, (len(shared), pairs)
# ---------------------------------------------------------------- crate deps

DEP_TABLES = ("dependencies", "dev-dependencies", "build-dependencies")


def listed_deps(manifest):
    """(table, package) of every dependency a parsed `Cargo.toml` lists."""
    tables = [(t, manifest.get(t, {})) for t in DEP_TABLES]
    for target, spec in manifest.get("target", {}).items():
        tables += [(f"target.{target}.{t}", spec.get(t, {})) for t in DEP_TABLES]
    for table, deps in tables:
        for key, dep in deps.items():
            package = dep.get("package", key) if isinstance(dep, dict) else key
            yield table, package


def gate_crate_deps(root):
    failures = []
    for rel, forbidden in sorted(FORBIDDEN_DEPS.items()):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            failures.append(f"{rel}: missing (the gate checks its dependencies)")
            continue
        with open(path, "rb") as f:
            try:
                manifest = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                failures.append(f"{rel}: not valid TOML: {e}")
                continue
        for table, package in listed_deps(manifest):
            if package in forbidden:
                failures.append(f"{rel}: [{table}] lists {package}, which this crate must not depend on")
    return failures


# ---------------------------------------------------------------- closed crates

# Crate roots and the public modules each may declare (its door).
CLOSED_CRATES = {
    "agent/src/lib.rs": ("testing",),
    "actors/src/lib.rs": ("api", "testing"),
}
PUB_MOD = re.compile(r"\bpub\s+mod\s+([A-Za-z_][A-Za-z0-9_]*)")
# A door's file and what it must never re-export: items (by their last
# segment, whatever `as` renames them to) and modules (themselves, a glob of
# them, or any item under them when listed).
SEALED = {
    "actors/src/api.rs": {"items": ("Db",), "modules": ("db",)},
}
PUB_USE = re.compile(r"\bpub\s+use\s+([^;]*);")


def gate_closed_crates(root):
    failures = []
    for rel, allowed in sorted(CLOSED_CRATES.items()):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            failures.append(f"{rel}: missing (the gate checks its public modules)")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        _, code, _ = lex(text)
        for m in PUB_MOD.finditer(code):
            if m.group(1) not in allowed:
                line = code.count("\n", 0, m.start()) + 1
                door = ", ".join(allowed) or "none"
                failures.append(
                    f"{rel}:{line}: `pub mod {m.group(1)}` opens the crate beside its door "
                    f"(public modules: {door}): make it `mod {m.group(1)};` and re-export "
                    "what other crates use"
                )
    for rel, sealed in sorted(SEALED.items()):
        failures += sealed_re_exports(root, rel, sealed)
    return failures


def sealed_re_exports(root, rel, sealed):
    """Where door `rel` re-exports what `sealed` names (see `SEALED`)."""
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return [f"{rel}: missing (the gate checks what it re-exports)"]
    with open(path, encoding="utf-8") as f:
        _, code, _ = lex(f.read())
    failures = []
    for m in PUB_USE.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        for segments, _ in parse_use_tree(m.group(1)):
            last = segments[-1] if segments else None
            if last in sealed["items"]:
                what = f"`{last}`"
            elif last in sealed["modules"]:
                what = f"module `{last}`"
            else:
                continue
            failures.append(
                f"{rel}:{line}: `pub use {'::'.join(segments)}` re-exports {what}, which "
                "stays inside its crate: offer a narrow handle instead (as `api::bench::BenchStore`)"
            )
    return failures


# ---------------------------------------------------------------- main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "gate",
        nargs="?",
        default="all",
        choices=["all", "lines", "functions", "cycles", "sql-states", "migrations", "crate-deps", "closed-crates"],
    )
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    failed = False
    if args.gate in ("all", "lines"):
        found = gate_lines(root)
        for f in found:
            print(f"gate lines: {f}", file=sys.stderr)
        if not found:
            print(f"gate lines: no production Rust file over {MAX_LINES} lines")
        failed |= bool(found)
    if args.gate in ("all", "functions"):
        found = gate_functions(root)
        for f in found:
            print(f"gate functions: {f}", file=sys.stderr)
        if not found:
            print(f"gate functions: no production Rust function over {MAX_FN_LINES} lines")
        failed |= bool(found)
    if args.gate in ("all", "cycles"):
        found, summary = gate_cycles(root)
        for f in found:
            print(f"gate cycles: {f}", file=sys.stderr)
        if not found:
            print(f"gate cycles: no import cycle between modules or files ({'; '.join(summary)})")
        failed |= bool(found)
    if args.gate in ("all", "sql-states"):
        found, names = gate_sql_states(root)
        for f in found:
            print(f"gate sql-states: {f}", file=sys.stderr)
        if not found:
            print(f"gate sql-states: none of the {len(names)} stored state names spelled in SQL")
        failed |= bool(found)
    if args.gate in ("all", "migrations"):
        found, (shared, pairs) = gate_migrations(root)
        for f in found:
            print(f"gate migrations: {f}", file=sys.stderr)
        if not found:
            print(
                f"gate migrations: {shared} shared migrations, {pairs} pairs that differ by dialect, "
                "no dialect alone"
            )
        failed |= bool(found)
    if args.gate in ("all", "crate-deps"):
        found = gate_crate_deps(root)
        for f in found:
            print(f"gate crate-deps: {f}", file=sys.stderr)
        if not found:
            checked = ", ".join(f"{k} ({', '.join(v)})" for k, v in sorted(FORBIDDEN_DEPS.items()))
            print(f"gate crate-deps: no forbidden dependency: {checked}")
        failed |= bool(found)
    if args.gate in ("all", "closed-crates"):
        found = gate_closed_crates(root)
        for f in found:
            print(f"gate closed-crates: {f}", file=sys.stderr)
        if not found:
            checked = ", ".join(f"{k} ({', '.join(v)})" for k, v in sorted(CLOSED_CRATES.items()))
            sealed = ", ".join(f"{k} ({', '.join(v['items'] + v['modules'])})" for k, v in sorted(SEALED.items()))
            print(f"gate closed-crates: no public module beside the doors: {checked}; nothing sealed re-exported: {sealed}")
        failed |= bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
