#!/usr/bin/env python3
"""The gates of `scripts/gates.py` gate: each is run on a small fixture
tree (made in a temporary directory) that it must refuse, and on one it
must pass. Run by `scripts/test.sh` before the gates themselves."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gates.py")

STATE_RS = """pub enum BuildStatus { Pending, Aborted }
impl BuildStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            BuildStatus::Pending => "pending",
            BuildStatus::Aborted => "aborted",
        }
    }
}
"""


def tree(files):
    """A temporary tree holding `files` {relative path: text}."""
    root = tempfile.mkdtemp(prefix="gates-fixture-")
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return root


def run(gate, files):
    root = tree(files)
    try:
        p = subprocess.run(
            [sys.executable, GATES, "--root", root, gate], capture_output=True, text=True
        )
    finally:
        shutil.rmtree(root)
    return p.returncode, p.stdout + p.stderr


CRATE = {"Cargo.toml": "[package]\nname = \"x\"\n", "wire/src/state.rs": STATE_RS}


class Lines(unittest.TestCase):
    def test_a_long_production_file_fails_naming_it(self):
        code, out = run("lines", {"src/big.rs": "fn f() {}\n" * 701})
        self.assertEqual(code, 1, out)
        self.assertIn("src/big.rs: 701 lines", out)

    def test_tests_after_cfg_test_and_under_tests_do_not_count(self):
        body = "fn f() {}\n" * 700 + "#[cfg(test)]\nmod tests {\n" + "\n" * 900 + "}\n"
        code, out = run("lines", {"src/ok.rs": body, "tests/e2e.rs": "\n" * 2000})
        self.assertEqual(code, 0, out)


def long_fn(name, lines, indent=""):
    """A function `name` of `lines` lines, `fn` line to closing brace."""
    body = "".join(f"{indent}    let _ = {k};\n" for k in range(lines - 2))
    return f"{indent}fn {name}() {{\n{body}{indent}}}\n"


class Functions(unittest.TestCase):
    def test_a_long_function_fails_naming_file_line_and_length(self):
        code, out = run("functions", {"src/a.rs": "use x;\n\n" + long_fn("big", 151)})
        self.assertEqual(code, 1, out)
        self.assertIn("src/a.rs:3 fn big: 151 lines", out)

    def test_methods_and_nested_fns_are_measured_too(self):
        method = "impl S {\n    pub(crate) async fn m(&self) {\n" + long_fn("inner", 151, "        ") + "    }\n}\n"
        code, out = run("functions", {"src/a.rs": method})
        self.assertEqual(code, 1, out)
        self.assertIn("src/a.rs:2 fn m: 153 lines", out)
        self.assertIn("src/a.rs:3 fn inner: 151 lines", out)

    def test_braces_in_literals_and_comments_do_not_end_the_body(self):
        # The `}`s in strings, raw strings, chars and comments would end the
        # short function early if read as code; its true length is 152 lines.
        tricky = (
            "fn f() {\n"
            '    let _ = "}}}";\n'
            '    let _ = r#"}"}"#;\n'
            '    let _ = br"}";\n'
            "    let _ = '}';\n"
            "    let _ = b'}';\n"
            "    // }\n"
            "    /* } /* } */ } */\n"
            + "".join("    let _ = 1;\n" for _ in range(143))
            + "}\n"
        )
        code, out = run("functions", {"src/a.rs": tricky})
        self.assertEqual(code, 1, out)
        self.assertIn("src/a.rs:1 fn f: 152 lines", out)

    def test_a_test_module_declared_above_does_not_hide_production_fns(self):
        text = "#[cfg(test)]\nmod a_tests;\n\n" + long_fn("start", 151)
        code, out = run("functions", {"src/web.rs": text})
        self.assertEqual(code, 1, out)
        self.assertIn("src/web.rs:4 fn start: 151 lines", out)

    def test_short_fns_declarations_tests_and_tests_dir_pass(self):
        ok = (
            long_fn("just_fits", 150)
            + "trait T {\n    fn decl(&self, S { a }: S);\n}\n"
            + "fn destructures(S { a }: S) -> u32 {\n    a\n}\n"
            + "#[cfg(test)]\nmod tests {\n" + long_fn("a_long_test", 400) + "}\n"
        )
        code, out = run("functions", {"src/ok.rs": ok, "tests/e2e.rs": long_fn("e2e", 400)})
        self.assertEqual(code, 0, out)


class Cycles(unittest.TestCase):
    def test_a_cycle_between_modules_fails_naming_both(self):
        code, out = run(
            "cycles",
            dict(
                CRATE,
                **{
                    "src/lib.rs": "mod a;\nmod b;\n",
                    "src/a.rs": "use crate::b::B;\npub struct A;\n",
                    "src/b.rs": "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
                },
            ),
        )
        self.assertEqual(code, 1, out)
        self.assertIn("import cycle between the modules of crate src/lib.rs: a, b", out)

    def test_a_cycle_between_files_of_a_module_fails_through_a_re_export(self):
        code, out = run(
            "cycles",
            dict(
                CRATE,
                **{
                    "src/lib.rs": "mod m;\n",
                    "src/m/mod.rs": "mod x;\nmod y;\npub use y::Y;\n",
                    # x names y's item through its parent's re-export.
                    "src/m/x.rs": "use super::Y;\npub struct X;\n",
                    "src/m/y.rs": "use super::{x::X};\npub struct Y;\n",
                },
            ),
        )
        self.assertEqual(code, 1, out)
        self.assertIn("import cycle between the files of module m (src/m/mod.rs): x, y", out)

    def test_one_way_paths_parents_tests_and_comments_pass(self):
        code, out = run(
            "cycles",
            dict(
                CRATE,
                **{
                    "src/lib.rs": "mod a;\nmod b;\n#[cfg(test)]\nmod t;\n",
                    "src/a.rs": "mod inner;\nuse crate::b::B;\npub struct A;\n",
                    "src/a/inner.rs": "use super::A;\n",
                    # A comment, a string and a test module name `a`.
                    "src/b.rs": "// crate::a::A\npub struct B;\nconst S: &str = \"crate::a\";\n"
                    "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
                    "src/t.rs": "use crate::a::A;\n",
                },
            ),
        )
        self.assertEqual(code, 0, out)


class SqlStates(unittest.TestCase):
    def test_a_state_literal_in_sql_fails_naming_the_file(self):
        code, out = run(
            "sql-states",
            dict(
                CRATE,
                **{
                    "src/lib.rs": "mod db;\n",
                    "src/db.rs": 'fn f() { q("UPDATE builds SET status = \'aborted\' \\\n WHERE id = $1"); }\n',
                },
            ),
        )
        self.assertEqual(code, 1, out)
        self.assertIn("src/db.rs:1: the state 'aborted' spelled in SQL", out)

    def test_the_mapping_tests_and_prose_may_spell_a_state(self):
        code, out = run(
            "sql-states",
            dict(
                CRATE,
                **{
                    "actors/Cargo.toml": "[package]\nname = \"e\"\n",
                    "actors/src/lib.rs": "mod db;\n",
                    "actors/src/db/mod.rs": "mod states;\nfn f() { msg(\"the build was 'aborted'\"); }\n"
                    "#[cfg(test)]\nmod tests {\n    fn g() { q(\"UPDATE builds SET status = 'pending'\"); }\n}\n",
                    "actors/src/db/states.rs": "const ENDED: &str = \"status IN ('aborted')\";\n",
                },
            ),
        )
        self.assertEqual(code, 0, out)


class Migrations(unittest.TestCase):
    SHARED = {"migrations/0001_init.sql": "CREATE TABLE t (id TEXT);\n"}

    def test_an_identical_pair_fails_naming_the_shared_file(self):
        same = "ALTER TABLE t ADD COLUMN x TEXT;\n"
        code, out = run(
            "migrations",
            dict(
                self.SHARED,
                **{"migrations/sqlite/0002_x.sql": same, "migrations/postgres/0002_x.sql": same},
            ),
        )
        self.assertEqual(code, 1, out)
        self.assertIn(
            "migrations/sqlite/0002_x.sql, migrations/postgres/0002_x.sql: identical: "
            "make them one shared file, migrations/0002_x.sql",
            out,
        )

    def test_one_dialect_alone_fails_naming_the_missing_twin(self):
        code, out = run(
            "migrations",
            dict(self.SHARED, **{"migrations/postgres/0002_x.sql": "ALTER TABLE t ADD COLUMN x TEXT;\n"}),
        )
        self.assertEqual(code, 1, out)
        self.assertIn("migrations/postgres/0002_x.sql: no sqlite twin", out)

    def test_a_version_both_shared_and_a_pair_fails(self):
        code, out = run(
            "migrations",
            dict(
                self.SHARED,
                **{"migrations/sqlite/0001_init.sql": "a\n", "migrations/postgres/0001_init.sql": "b\n"},
            ),
        )
        self.assertEqual(code, 1, out)
        self.assertIn("version 0001 is also the shared migrations/0001_init.sql", out)

    def test_shared_files_and_differing_pairs_pass(self):
        code, out = run(
            "migrations",
            dict(
                self.SHARED,
                **{
                    "migrations/sqlite/0002_x.sql": "id INTEGER PRIMARY KEY AUTOINCREMENT\n",
                    "migrations/postgres/0002_x.sql": "id BIGSERIAL PRIMARY KEY\n",
                    "migrations/0003_y.sql": "CREATE INDEX t_id ON t (id);\n",
                },
            ),
        )
        self.assertEqual(code, 0, out)
        self.assertIn("2 shared migrations, 1 pairs", out)
CLIENT_TOML = "adapters/agent-client/Cargo.toml"
KUBE_TOML = "adapters/kubernetes/Cargo.toml"
KUBE_OK = "[package]\nname = \"k\"\n\n[dependencies]\ngantry-worker-common.workspace = true\n"
LANG_TOML = "language/Cargo.toml"
LANG_OK = "[package]\nname = \"l\"\n\n[dependencies]\ngantry-wire.workspace = true\nserde_yaml.workspace = true\n"


class CrateDeps(unittest.TestCase):
    def test_the_client_depending_on_the_agent_fails_in_any_table(self):
        for deps in (
            "[dependencies]\ngantry-agent.workspace = true\n",
            "[dev-dependencies]\ngantry-agent = { workspace = true, features = [\"testing\"] }\n",
            "[target.'cfg(unix)'.dependencies]\nagent = { package = \"gantry-agent\", path = \"../../agent\" }\n",
        ):
            manifest = "[package]\nname = \"c\"\n\n" + deps
            code, out = run("crate-deps", {CLIENT_TOML: manifest, KUBE_TOML: KUBE_OK, LANG_TOML: LANG_OK})
            self.assertEqual(code, 1, out)
            self.assertIn(f"{CLIENT_TOML}: [", out)
            self.assertIn("lists gantry-agent", out)

    def test_the_client_on_the_wire_crate_passes(self):
        toml = (
            "[package]\nname = \"c\"\n\n[dependencies]\n"
            "gantry-wire = { workspace = true, features = [\"trace\"] }\n"
            "gantry-agent-helpers = \"1\"\n"
        )
        code, out = run("crate-deps", {CLIENT_TOML: toml, KUBE_TOML: KUBE_OK, LANG_TOML: LANG_OK})
        self.assertEqual(code, 0, out)

    def test_the_kubernetes_runtime_depending_on_the_agent_fails(self):
        kube = KUBE_OK + "gantry-agent.workspace = true\n"
        client = "[package]\nname = \"c\"\n"
        code, out = run("crate-deps", {CLIENT_TOML: client, KUBE_TOML: kube, LANG_TOML: LANG_OK})
        self.assertEqual(code, 1, out)
        self.assertIn(f"{KUBE_TOML}: [dependencies] lists gantry-agent", out)

    def test_the_language_depending_on_a_database_or_the_engine_fails(self):
        client = "[package]\nname = \"c\"\n"
        for dep in ("sqlx.workspace = true", "gantry-actors.workspace = true"):
            lang = LANG_OK + dep + "\n"
            code, out = run(
                "crate-deps", {CLIENT_TOML: client, KUBE_TOML: KUBE_OK, LANG_TOML: lang}
            )
            self.assertEqual(code, 1, out)
            self.assertIn(f"{LANG_TOML}: [dependencies] lists {dep.split('.')[0]}", out)

    def test_a_missing_manifest_fails_rather_than_passing_unread(self):
        code, out = run("crate-deps", {KUBE_TOML: KUBE_OK, LANG_TOML: LANG_OK})
        self.assertEqual(code, 1, out)
        self.assertIn(f"{CLIENT_TOML}: missing", out)


AGENT_LIB = "agent/src/lib.rs"
ENGINE_LIB = "actors/src/lib.rs"
ENGINE_DOOR = "pub mod api;\nmod db;\n#[cfg(feature = \"testing\")]\npub mod testing;\n"
ENGINE_API = "actors/src/api.rs"
API_OK = (
    "//! Never `pub use crate::db::Db;`.\npub use crate::engine::Engine;\n"
    "pub(crate) use crate::db::Db;\n"
    "pub mod bench {\n    pub use crate::bench_store::BenchStore;\n    pub use crate::db::Bench;\n}\n"
)


class ClosedCrates(unittest.TestCase):
    def test_a_public_module_beside_the_door_fails_naming_it(self):
        lib = "mod worker;\n#[doc(hidden)]\npub mod beacon;\npub use worker::start_worker;\n"
        code, out = run("closed-crates", {AGENT_LIB: lib, ENGINE_LIB: ENGINE_DOOR, ENGINE_API: API_OK})
        self.assertEqual(code, 1, out)
        self.assertIn(f"{AGENT_LIB}:3: `pub mod beacon` opens the crate", out)

    def test_an_inline_public_module_fails_too(self):
        lib = "mod worker;\npub mod api {\n    pub use crate::worker::start_worker;\n}\n"
        code, out = run("closed-crates", {AGENT_LIB: lib, ENGINE_LIB: ENGINE_DOOR, ENGINE_API: API_OK})
        self.assertEqual(code, 1, out)
        self.assertIn("`pub mod api`", out)

    def test_private_modules_re_exports_and_the_doors_pass(self):
        lib = (
            "// pub mod old; was public\nmod worker;\npub(crate) mod shared;\n"
            "#[cfg(any(test, feature = \"testing\"))]\npub mod testing;\n"
            "pub use worker::{start_worker, WorkerHandle};\n"
            "const DOC: &str = \"pub mod x\";\n"
        )
        code, out = run("closed-crates", {AGENT_LIB: lib, ENGINE_LIB: ENGINE_DOOR, ENGINE_API: API_OK})
        self.assertEqual(code, 0, out)

    def test_the_engine_api_re_exporting_the_database_fails(self):
        lib = "mod worker;\n"
        for use in (
            "pub use crate::db::{Bench, Db, Direction};",
            "pub use crate::db::Db as Database;",
            "pub use crate::db::*;",
            "pub use crate::{db, engine::Engine};",
        ):
            api = API_OK.replace("    pub use crate::db::Bench;", "    " + use)
            code, out = run("closed-crates", {AGENT_LIB: lib, ENGINE_LIB: ENGINE_DOOR, ENGINE_API: api})
            self.assertEqual(code, 1, (use, out))
            self.assertIn(f"{ENGINE_API}:6: `pub use crate::db", out)

    def test_a_missing_engine_api_fails_rather_than_passing_unread(self):
        code, out = run("closed-crates", {AGENT_LIB: "mod worker;\n", ENGINE_LIB: ENGINE_DOOR})
        self.assertEqual(code, 1, out)
        self.assertIn(f"{ENGINE_API}: missing", out)


if __name__ == "__main__":
    unittest.main()
