#!/usr/bin/env python3
"""Runs the test binaries cargo built, several at once.

Reads cargo's JSON messages (`cargo test --no-run --message-format=json`)
on stdin, runs each test binary from its package's directory (as `cargo
test` does) with `--test-threads 2`, JOBS at a time (the environment's
GANTRY_TEST_JOBS, default 3), the slowest first. The end-to-end binary
(`e2e`, tests/e2e.rs) holds every area as a module: each module runs as a
process of its own (`e2e --exact NAME...`), as when each area was a binary. Most
end-to-end tests wait on processes, containers and the network, so the two
cores are mostly idle while one binary runs; running several at once uses
them. Each binary's output goes to target/test-logs/NAME.log; a line per
binary tells how it ended, a failed one's log is printed whole, and the
exit status is 1 if any failed.
"""

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

# The binaries that take longest, started first so none is left alone at the end.
SLOW_FIRST = [
    "dashboard_a11y",
    "pipelines",
    "gc_soak",
    "resume_plans",
    "dashboard_actions",
    "web_nodes",
    "pipeline_controls",
    "testflight",
    "fleet",
    "background_jobs",
    "gc_pressure",
    "gantry_actors::lib",
    "web_restart",
    "worker_restart",
    "rolling_upgrade",
    "dashboard_browser",
    "web_nodes_start",
    "streaming",
    "custom_types",
    "gc_sweep",
    "abort",
    "resources",
    "run_job",
]

RESULT = re.compile(r"test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored")


def binaries(messages):
    """(name, executable, package dir) of every test binary built."""
    found = []
    for line in messages:
        line = line.strip()
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        name = target["name"]
        if target["kind"] != ["test"]:
            # A crate's own unit tests: its library's or its binary's.
            name = f"{name}::{target['kind'][0]}"
        found.append((name, msg["executable"], os.path.dirname(msg["manifest_path"])))
    return found


def split_modules(found):
    """The e2e binary's modules, each a run of its own: (name, argv, dir)."""
    runs = []
    for name, exe, cwd in found:
        if name != "e2e":
            runs.append((name, [exe], cwd))
            continue
        listed = subprocess.run([exe, "--list", "--format", "terse"], cwd=cwd,
                                capture_output=True, text=True, check=True).stdout
        modules = {}
        for line in listed.splitlines():
            if not line.endswith(": test"):
                continue
            test = line[: -len(": test")]
            modules.setdefault(test.split("::", 1)[0], []).append(test)
        for module, tests in modules.items():
            runs.append((module, [exe, "--exact", *tests], cwd))
    return runs


def order(found):
    """The slow ones first, then the rest in cargo's order."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    return sorted(found, key=lambda b: rank.get(b[0], len(SLOW_FIRST)))


def run(binary, logs):
    name, argv, cwd = binary
    log_path = os.path.join(logs, re.sub(r"[^\w.-]", "_", name) + ".log")
    started = time.monotonic()
    with open(log_path, "w") as log:
        code = subprocess.call([*argv, "--test-threads", "2"], cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    took = time.monotonic() - started
    with open(log_path) as log:
        text = log.read()
    counts = [0, 0, 0]
    for m in RESULT.finditer(text):
        for i in range(3):
            counts[i] += int(m.group(i + 2))
    return name, code, took, counts, text


def main():
    jobs = int(os.environ.get("GANTRY_TEST_JOBS", "3"))
    found = order(split_modules(binaries(sys.stdin)))
    if not found:
        print("run_tests: cargo built no test binary", file=sys.stderr)
        return 1
    logs = os.path.join("target", "test-logs")
    os.makedirs(logs, exist_ok=True)
    print(f"running {len(found)} test processes, {jobs} at a time")
    started = time.monotonic()
    failed = []
    totals = [0, 0, 0]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done in as_completed([pool.submit(run, b, logs) for b in found]):
            name, code, took, counts, text = done.result()
            totals = [a + b for a, b in zip(totals, counts)]
            state = "ok" if code == 0 else "FAILED"
            print(f"{state} {name} in {took:.1f} s: {counts[0]} passed, {counts[1]} failed, {counts[2]} ignored", flush=True)
            if code != 0:
                failed.append((name, text))
    for name, text in failed:
        print(f"\n===== {name} =====\n{text}")
    took = time.monotonic() - started
    print(f"\ntests: {totals[0]} passed, {totals[1]} failed, {totals[2]} ignored, in {took:.0f} s")
    if failed:
        print("failed: " + ", ".join(n for n, _ in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
