#!/usr/bin/env bash
# Runs Gantry's whole test suite on a fresh Debian machine (root, Rust toolchain):
# installs what the tests need, starts PostgreSQL if it is down, then runs
# clippy and every test (unit and end-to-end, against SQLite and PostgreSQL).
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v runc >/dev/null || need_pkgs+=(runc)
command -v bwrap >/dev/null || need_pkgs+=(bubblewrap)
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need_pkgs+=(busybox-static)
command -v jq >/dev/null || need_pkgs+=(jq)
command -v git >/dev/null || need_pkgs+=(git)
command -v psql >/dev/null || need_pkgs+=(postgresql-client)
# The database dump of tests/p2p_security.rs (pg_dump is in postgresql-client).
command -v sqlite3 >/dev/null || need_pkgs+=(sqlite3)
command -v pg_ctlcluster >/dev/null || need_pkgs+=(postgresql)
# The dashboard's browser test drives headless Chromium.
command -v chromium >/dev/null || need_pkgs+=(chromium)
# promtool checks /metrics (tests/metrics.rs); the package's server is not needed.
command -v promtool >/dev/null || need_pkgs+=(prometheus)
command -v runuser >/dev/null || need_pkgs+=(util-linux)
# The registry image tests: a real registry (the CNCF distribution registry),
# skopeo to push images into it, htpasswd and openssl for its auth and TLS.
command -v docker-registry >/dev/null || need_pkgs+=(docker-registry)
command -v skopeo >/dev/null || need_pkgs+=(skopeo)
command -v htpasswd >/dev/null || need_pkgs+=(apache2-utils)
command -v openssl >/dev/null || need_pkgs+=(openssl)
# The crun backend's tests, and the image pull benchmark's baseline.
command -v crun >/dev/null || need_pkgs+=(crun)
command -v umoci >/dev/null || need_pkgs+=(umoci)
command -v python3 >/dev/null || need_pkgs+=(python3)
# The sign-in tests' OpenID provider (oidc-provider, from npm) runs on Node.js.
command -v node >/dev/null || need_pkgs+=(nodejs)
command -v npm >/dev/null || need_pkgs+=(npm)
dpkg -s python3-venv >/dev/null 2>&1 || need_pkgs+=(python3-venv)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "installing: ${need_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# The source gates (docs/architecture.md, "Gates"), before anything is
# built: no production file over 700 lines nor function over 150, no
# import cycle between the modules of a crate or the files of a module, no
# stored state spelled in SQL outside the engine's state mapping, one
# migrations tree (no identical dialect pair, no dialect alone). Their self-tests first: each gate must
# refuse a fixture tree that breaks it.
python3 scripts/gates_test.py -q
python3 scripts/gates.py all

# crun refuses a hybrid cgroup layout whose v2 hierarchy holds controllers
# (on these machines hugetlb, which no v1 hierarchy mounts): mount each as v1
# beside the others, as the worker's error message says.
if [ -r /sys/fs/cgroup/unified/cgroup.controllers ]; then
  for c in $(cat /sys/fs/cgroup/unified/cgroup.controllers); do
    echo "mounting cgroup controller $c as v1 (for crun)"
    mkdir -p "/sys/fs/cgroup/$c" && mount -t cgroup -o "$c" "$c" "/sys/fs/cgroup/$c" || true
  done
fi

pg_up() { psql "postgres://postgres@127.0.0.1:5432/postgres" -qAtc 'select 1' >/dev/null 2>&1; }
if ! pg_up; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 60); do pg_up && break; sleep 1; done
  pg_up || { echo "PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }
fi
# Several web nodes per test (five in web_nodes_start), three tests at a
# time: more than PostgreSQL's default 100 connections at peak.
pg_max=$(psql "postgres://postgres@127.0.0.1:5432/postgres" -qAtc 'show max_connections')
if [ "$pg_max" -lt 300 ]; then
  echo "raising PostgreSQL's max_connections from $pg_max to 300"
  psql "postgres://postgres@127.0.0.1:5432/postgres" -qAtc 'alter system set max_connections = 300' >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main restart ||
    echo "warning: PostgreSQL could not be restarted; max_connections stays $pg_max" >&2
  for _ in $(seq 1 60); do pg_up && break; sleep 1; done
  pg_up || { echo "PostgreSQL is not reachable on 127.0.0.1:5432 after its restart" >&2; exit 1; }
fi
export GANTRY_TEST_PG="postgres://postgres@127.0.0.1:5432"
# The runc tests must run here (root, runc installed above), never skip.
export GANTRY_REQUIRE_RUNC=1

# An independent OpenAPI validator for tests/openapi.rs, in its own venv.
validator=target/pyenv/bin/openapi-spec-validator
if [ ! -x "$validator" ]; then
  echo "installing openapi-spec-validator in target/pyenv"
  python3 -m venv target/pyenv
  target/pyenv/bin/pip install -q openapi-spec-validator
fi
export GANTRY_OPENAPI_VALIDATOR="$PWD/$validator"
# concoursepy (PyPI), a Concourse client no one here wrote, for
# tests/concoursepy.rs (pure Python, pinned; before moto's background
# install, so two pips never write the venv at once).
if ! target/pyenv/bin/python -c 'import concoursepy' 2>/dev/null; then
  echo "installing concoursepy in target/pyenv"
  target/pyenv/bin/pip install -q 'concoursepy==0.0.20'
fi
export GANTRY_CONCOURSEPY_PYTHON="$PWD/target/pyenv/bin/python"
# A real AWS emulator for tests/secrets_aws.rs (moto's server, from PyPI),
# installed while the builds below compile (pure Python wheels: about a
# minute of network, not of CPU).
moto=target/pyenv/bin/moto_server
moto_install=
if [ ! -x "$moto" ]; then
  echo "installing moto[server] in target/pyenv (in the background)"
  target/pyenv/bin/pip install -q 'moto[server]' > target/moto-install.log 2>&1 &
  moto_install=$!
fi
export GANTRY_MOTO_SERVER="$PWD/$moto"
# Node packages the tests run, each from npm at the version its lock file
# pins (plain JavaScript, nothing compiled), installed into target/DIR
# again when the lock file changes: npm_tool SOURCE_DIR DIR PACKAGE.
npm_tool() {
  local dir="target/$2"
  if ! cmp -s "tests/$1/package-lock.json" "$dir/package-lock.json" ||
    [ ! -f "$dir/node_modules/$3/package.json" ]; then
    echo "installing $3 in $dir"
    rm -rf "$dir" && mkdir -p "$dir"
    cp "tests/$1/package.json" "tests/$1/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
# The OpenID provider of tests/oidc.rs: oidc-provider, a certified OpenID
# Connect implementation.
npm_tool oidc oidc-provider oidc-provider
export GANTRY_OIDC_PROVIDER="$PWD/target/oidc-provider/node_modules/oidc-provider"
# axe-core (MPL-2.0), the accessibility engine tests/dashboard_a11y.rs runs
# on every dashboard page in Chromium.
npm_tool axe axe-core axe-core
export GANTRY_AXE_CORE="$PWD/target/axe-core/node_modules/axe-core/axe.min.js"


# The worker agent's dependency tree holds no database, Kubernetes client,
# OpenAPI, metrics exporter, progress bars, object storage client or engine
# (docs/architecture.md).
forbidden=$(cargo tree -p gantry-agent -e normal --prefix none | sed 's/ v[0-9].*//' | sort -u |
  grep -E '^(sqlx|kube|utoipa|metrics-exporter-prometheus|indicatif|object_store|gantry-actors)(-.*)?$' || true)
if [ -n "$forbidden" ]; then
  echo "gantry-agent must not depend on: $forbidden" >&2
  exit 1
fi
echo "gantry-agent's dependency tree: no sqlx, kube, utoipa, metrics-exporter-prometheus, indicatif, object_store or gantry-actors"

# Nor does the pipeline language's (what `gantry validate-plan` reads
# with): no database, no actix, no engine (the `validate_plan` area's
# test checks the same).
forbidden=$(cargo tree -p gantry-language -e normal --prefix none | sed 's/ v[0-9].*//' | sort -u |
  grep -E '^(sqlx|actix|gantry-actors)(-.*)?$' || true)
if [ -n "$forbidden" ]; then
  echo "gantry-language must not depend on: $forbidden" >&2
  exit 1
fi
echo "gantry-language's dependency tree: no sqlx, actix or gantry-actors"

# The lints run inside the builds, as `cargo clippy` runs them in check
# mode: clippy's driver is the workspace's compiler wrapper, denying every
# warning, so each dependency compiles once (a separate `cargo clippy`
# would check the whole dependency tree again, several minutes of a fresh
# clone). Only the workspace's crates are linted.
export RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# A fresh clone compiles each crate once: incremental compilation's
# records would only be written, never read.
export CARGO_INCREMENTAL=0
# The shipping code (no `bench` feature: no benchmarks, no test doubles)
# must be as clean as the one the tests run: every library as the binary
# links it, and the binary. Built as the binary's unit tests, which brings
# in the dev-dependencies, so both builds share one set of dependency
# features and nothing compiles twice; the libraries' own unit tests are
# built once, in the test build below.
cargo test --workspace --no-run --bins
# Every test binary built (the end-to-end tests are one binary, e2e, and
# the S3 test server an example), linted, then run three processes at a
# time, one per unit-test binary or e2e area (scripts/run_tests.py: the
# end-to-end tests mostly wait, so one at a time leaves the cores idle).
cargo test --workspace --features gantry/bench --no-run --message-format=json-render-diagnostics \
  > target/test-binaries.json
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
if [ -n "$moto_install" ] && ! wait "$moto_install"; then
  cat target/moto-install.log >&2
  echo "installing moto[server] failed" >&2
  exit 1
fi
python3 scripts/run_tests.py < target/test-binaries.json
