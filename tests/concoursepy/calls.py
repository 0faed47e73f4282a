"""Drives a Gantry node with concoursepy (PyPI), a Concourse client no one
here wrote, and checks each answer against the shape of Concourse's own
Go types (atc/*.go): every field the Go struct always sends is present
with its JSON type.

    calls.py URL TEAM PIPELINE JOB RESOURCE

Prints one JSON line per concoursepy call that Concourse serves (its route
in atc/routes.go): {"call", "route", "ok", "why"}. The calls concoursepy
makes to routes Concourse no longer has (pause_resource, causality,
build plan input/output) are not made, nor those that fail against
Concourse itself: `list_builds_with_version_as_output` asks `output_to`
(Concourse's route is `output_of`), `unpin_resource_version` asks
`versions/ID/unpin` (Concourse's is `resources/NAME/unpin`), and the
badge calls decode the SVG as JSON.
"""

import json
import sys

import concoursepy

URL, TEAM, PIPELINE, JOB, RESOURCE = sys.argv[1:6]
TOKEN = sys.argv[6] if len(sys.argv) > 6 else None


class Shape(Exception):
    pass


def need(obj, field, kind, where):
    if not isinstance(obj, dict):
        raise Shape(f"{where}: not an object: {str(obj)[:80]}")
    if field not in obj:
        raise Shape(f"{where}: no {field!r} (has {sorted(obj)[:12]})")
    value = obj[field]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise Shape(f"{where}.{field}: {value!r} is not an integer")
    if kind is not int and not isinstance(value, kind):
        raise Shape(f"{where}.{field}: {value!r} is not {kind}")
    return value


def may(obj, field, kind, where):
    if isinstance(obj, dict) and obj.get(field) is not None:
        need(obj, field, kind, where)


def build(b, where="build"):
    need(b, "id", int, where)
    need(b, "team_name", str, where)
    need(b, "name", str, where)
    status = need(b, "status", str, where)
    if status not in ("pending", "started", "succeeded", "failed", "errored", "aborted"):
        raise Shape(f"{where}.status: {status!r}")
    need(b, "api_url", str, where)
    for f in ("start_time", "end_time", "reap_time", "rerun_number", "pipeline_id"):
        may(b, f, int, where)
    for f in ("job_name", "pipeline_name", "resource_name", "comment"):
        may(b, f, str, where)
    may(b, "rerun_of", dict, where)


def builds(xs, where="builds"):
    if not isinstance(xs, list):
        raise Shape(f"{where}: not a list")
    for i, b in enumerate(xs):
        build(b, f"{where}[{i}]")


def team(t, where="team"):
    need(t, "id", int, where)
    need(t, "name", str, where)
    may(t, "auth", dict, where)


def pipeline(p, where="pipeline"):
    need(p, "id", int, where)
    need(p, "name", str, where)
    need(p, "paused", bool, where)
    need(p, "public", bool, where)
    need(p, "archived", bool, where)
    need(p, "team_name", str, where)
    may(p, "instance_vars", dict, where)


def job(j, where="job"):
    need(j, "id", int, where)
    need(j, "name", str, where)
    need(j, "team_name", str, where)
    need(j, "pipeline_id", int, where)
    need(j, "pipeline_name", str, where)
    may(j, "paused", bool, where)
    for f in ("next_build", "finished_build"):
        if f not in j:
            raise Shape(f"{where}: no {f!r}")
        if j[f] is not None:
            build(j[f], f"{where}.{f}")
    for i, inp in enumerate(j.get("inputs") or []):
        need(inp, "name", str, f"{where}.inputs[{i}]")
        need(inp, "resource", str, f"{where}.inputs[{i}]")
        need(inp, "trigger", bool, f"{where}.inputs[{i}]")
    for i, out in enumerate(j.get("outputs") or []):
        need(out, "name", str, f"{where}.outputs[{i}]")
        need(out, "resource", str, f"{where}.outputs[{i}]")


def resource(r, where="resource"):
    need(r, "name", str, where)
    need(r, "pipeline_id", int, where)
    need(r, "pipeline_name", str, where)
    need(r, "team_name", str, where)
    need(r, "type", str, where)
    may(r, "last_checked", int, where)
    may(r, "pinned_version", dict, where)


def version(v, where="version"):
    need(v, "id", int, where)
    need(v, "version", dict, where)
    need(v, "enabled", bool, where)


def each(check):
    def run(xs, where="list"):
        if not isinstance(xs, list):
            raise Shape(f"{where}: not a list: {str(xs)[:80]}")
        for i, x in enumerate(xs):
            check(x, f"{where}[{i}]")
    return run


def events(es, where="events"):
    if not isinstance(es, list) or not es:
        raise Shape(f"{where}: no events")
    if es[-1].get("event") != "end":
        raise Shape(f"{where}: the last event is {es[-1].get('event')!r}, not end")
    for e in es[:-1]:
        data = e.get("data")
        need(data, "event", str, where)
        need(data, "version", str, where)
        need(data, "data", dict, where)


def plan(p, where="plan"):
    need(p, "schema", str, where)
    need(p, "plan", dict, where)


def preparation(p, where="preparation"):
    need(p, "build_id", int, where)
    for f in ("paused_pipeline", "paused_job", "max_running_builds", "inputs_satisfied"):
        need(p, f, str, where)
    need(p, "inputs", dict, where)


def build_io(r, where="resources"):
    need(r, "inputs", list, where)
    need(r, "outputs", list, where)


def config(c, where="config"):
    need(c, "config", dict, where)


def inputs(xs, where="inputs"):
    each(lambda i, w: (need(i, "name", str, w), need(i, "resource", str, w),
                       need(i, "type", str, w), need(i, "version", dict, w)))(xs, where)


def truthy(x, where="answer"):
    if x is not True:
        raise Shape(f"{where}: concoursepy read {x!r} (a 200 is True)")


def main():
    api = concoursepy.api(URL, token=TOKEN)
    state = {}

    def first_version():
        if "version" not in state:
            vs = api.list_resource_versions(TEAM, PIPELINE, RESOURCE)
            state["version"] = vs[0]["id"]
        return state["version"]

    def first_build():
        if "build" not in state:
            state["build"] = api.list_job_builds(TEAM, PIPELINE, JOB)[0]
        return state["build"]

    calls = [
        ("list_teams", "ListTeams", lambda: api.list_teams(), each(team)),
        ("get_team", "GetTeam", lambda: api.get_team(TEAM), team),
        ("get_config", "GetConfig", lambda: api.get_config(TEAM, PIPELINE), config),
        ("list_all_pipelines", "ListAllPipelines", lambda: api.list_all_pipelines(), each(pipeline)),
        ("list_pipelines", "ListPipelines", lambda: api.list_pipelines(TEAM), each(pipeline)),
        ("get_pipeline", "GetPipeline", lambda: api.get_pipeline(TEAM, PIPELINE), pipeline),
        ("list_all_jobs", "ListAllJobs", lambda: api.list_all_jobs(), each(job)),
        ("list_jobs", "ListJobs", lambda: api.list_jobs(TEAM, PIPELINE), each(job)),
        ("get_job", "GetJob", lambda: api.get_job(TEAM, PIPELINE, JOB), job),
        ("list_job_builds", "ListJobBuilds", lambda: api.list_job_builds(TEAM, PIPELINE, JOB), builds),
        ("get_job_build", "GetJobBuild",
         lambda: api.get_job_build(TEAM, PIPELINE, JOB, first_build()["name"]), build),
        ("list_job_inputs", "ListJobInputs", lambda: api.list_job_inputs(TEAM, PIPELINE, JOB), inputs),
        ("list_builds", "ListBuilds", lambda: api.list_builds(), builds),
        ("get_build", "GetBuild", lambda: api.get_build(first_build()["id"]), build),
        ("get_build_plan", "GetBuildPlan", lambda: api.get_build_plan(first_build()["id"]), plan),
        ("build_events", "BuildEvents", lambda: api.build_events(first_build()["id"]), events),
        ("build_resources", "BuildResources", lambda: api.build_resources(first_build()["id"]), build_io),
        ("get_build_preparation", "GetBuildPreparation",
         lambda: api.get_build_preparation(first_build()["id"]), preparation),
        ("list_pipeline_builds", "ListPipelineBuilds",
         lambda: api.list_pipeline_builds(TEAM, PIPELINE), builds),
        ("list_all_resources", "ListAllResources", lambda: api.list_all_resources(), each(resource)),
        ("list_resources", "ListResources", lambda: api.list_resources(TEAM, PIPELINE), each(resource)),
        ("list_resource_types", "ListResourceTypes",
         lambda: api.list_resource_types(TEAM, PIPELINE),
         each(lambda t, w: (need(t, "name", str, w), need(t, "type", str, w)))),
        ("get_resource", "GetResource", lambda: api.get_resource(TEAM, PIPELINE, RESOURCE), resource),
        ("list_resource_versions", "ListResourceVersions",
         lambda: api.list_resource_versions(TEAM, PIPELINE, RESOURCE), each(version)),
        ("get_resource_version", "GetResourceVersion",
         lambda: api.get_resource_version(TEAM, PIPELINE, RESOURCE, first_version()), version),
        ("list_builds_with_version_as_input", "ListBuildsWithVersionAsInput",
         lambda: api.list_builds_with_version_as_input(TEAM, PIPELINE, RESOURCE, first_version()), builds),
        ("disable_resource_version", "DisableResourceVersion",
         lambda: api.disable_resource_version(TEAM, PIPELINE, RESOURCE, first_version()), truthy),
        ("enable_resource_version", "EnableResourceVersion",
         lambda: api.enable_resource_version(TEAM, PIPELINE, RESOURCE, first_version()), truthy),
        ("pin_resource_version", "PinResourceVersion",
         lambda: api.pin_resource_version(TEAM, PIPELINE, RESOURCE, first_version()), truthy),
        ("pause_job", "PauseJob", lambda: api.pause_job(TEAM, PIPELINE, JOB), truthy),
        ("unpause_job", "UnpauseJob", lambda: api.unpause_job(TEAM, PIPELINE, JOB), truthy),
        ("pause_pipeline", "PausePipeline", lambda: api.pause_pipeline(TEAM, PIPELINE), truthy),
        ("unpause_pipeline", "UnpausePipeline", lambda: api.unpause_pipeline(TEAM, PIPELINE), truthy),
        ("create_job_build", "CreateJobBuild", lambda: api.create_job_build(TEAM, PIPELINE, JOB), build),
        ("abort_build", "AbortBuild", lambda: api.abort_build(api.list_job_builds(TEAM, PIPELINE, JOB)[0]["id"]),
         lambda x, where="answer": None),
    ]
    for name, route, call, check in calls:
        try:
            check(call())
            print(json.dumps({"call": name, "route": route, "ok": True, "why": ""}), flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
            why = f"{type(e).__name__}: {e}"[:300]
            print(json.dumps({"call": name, "route": route, "ok": False, "why": why}), flush=True)


main()
