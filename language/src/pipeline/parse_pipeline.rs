//! Reading a [`Pipeline`] out of YAML: every section, every job, every
//! resource, with unknown keys named and wrong types reported at their path.
//! As in Concourse, unknown keys at the top are ignored (they usually hold
//! YAML anchors); below the top every key must be known.

use serde_yaml::{Mapping, Value};

use super::model::*;
use super::parse_step::{hooks, parse_plan};
use super::read::{join, kind_of, Reader};
use crate::go_duration::parse_non_negative;

/// The top-level sections Concourse reads.
pub(crate) const TOP_KEYS: &[&str] = &[
    "jobs",
    "resources",
    "resource_types",
    "groups",
    "var_sources",
    "prototypes",
    "display",
    "user_data",
];

const JOB_KEYS: &[&str] = &[
    "name",
    "old_name",
    "public",
    "disable_manual_trigger",
    "disable_reruns",
    "serial",
    "interruptible",
    "serial_groups",
    "max_in_flight",
    "tags",
    "build_logs_to_retain",
    "build_log_retention",
    "on_success",
    "on_failure",
    "on_abort",
    "on_error",
    "ensure",
    "plan",
];

const RESOURCE_KEYS: &[&str] = &[
    "name",
    "old_name",
    "public",
    "webhook_token",
    "type",
    "source",
    "check_every",
    "check_timeout",
    "tags",
    "version",
    "icon",
    "expose_build_created_by",
];

const RESOURCE_TYPE_KEYS: &[&str] = &[
    "name",
    "type",
    "source",
    "defaults",
    "privileged",
    "check_every",
    "tags",
    "params",
];

/// Reads a pipeline document (a mapping).
pub(crate) fn parse_pipeline(r: &mut Reader, top: &Mapping) -> Pipeline {
    let ignored_keys = top
        .keys()
        .map(|k| {
            k.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{k:?}"))
        })
        .filter(|k| !TOP_KEYS.contains(&k.as_str()))
        .collect();
    Pipeline {
        jobs: section(r, top, "jobs", parse_job),
        resources: section(r, top, "resources", parse_resource),
        resource_types: section(r, top, "resource_types", |r, v, at| {
            parse_resource_type(r, v, at, "a resource type")
        }),
        prototypes: section(r, top, "prototypes", |r, v, at| {
            parse_resource_type(r, v, at, "a prototype")
        }),
        groups: section(r, top, "groups", parse_group),
        var_sources: section(r, top, "var_sources", parse_var_source),
        display: top
            .get("display")
            .filter(|v| !v.is_null())
            .and_then(|v| parse_display(r, v)),
        ignored_keys,
        names: Default::default(),
        as_set: Default::default(),
    }
}

/// Reads each entry of a top-level list. Entries are addressed by name
/// (`jobs[build]`) when they have one, else by index (`jobs[3]`).
fn section<T>(
    r: &mut Reader,
    top: &Mapping,
    key: &str,
    mut parse: impl FnMut(&mut Reader, &Value, &str) -> Option<T>,
) -> Vec<T> {
    let items = match top.get(key) {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Sequence(items)) => items,
        Some(v) => {
            r.problem(key, format!("must be a list, not {}", kind_of(v)));
            return Vec::new();
        }
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, v)| parse(r, v, &entry_path(key, i, v)))
        .collect()
}

/// `section[name]` for an entry with a string name fit for a path (see
/// [`super::validate::entry_at`]), else `section[index]`.
pub(crate) fn entry_path(section: &str, index: usize, v: &Value) -> String {
    let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
    super::validate::entry_at(section, index, name)
}

fn parse_job(r: &mut Reader, v: &Value, at: &str) -> Option<Job> {
    let m = r.mapping(v, at, "a job", JOB_KEYS)?;
    let build_log_retention = m
        .get("build_log_retention")
        .filter(|v| !v.is_null())
        .and_then(|v| {
            let at = join(at, "build_log_retention");
            let known = ["builds", "minimum_succeeded_builds", "days"];
            let bm = r.mapping(v, &at, "build_log_retention", &known)?;
            Some(BuildLogRetention {
                builds: r.non_negative(bm, "builds", &at),
                minimum_succeeded_builds: r.non_negative(bm, "minimum_succeeded_builds", &at),
                days: r.non_negative(bm, "days", &at),
            })
        });
    let build_logs_to_retain = r.non_negative(m, "build_logs_to_retain", at);
    if build_log_retention.is_some() && build_logs_to_retain.is_some() {
        r.problem(
            at,
            "can't use both build_log_retention and build_logs_to_retain",
        );
    }
    if let Some(BuildLogRetention {
        builds: Some(builds),
        minimum_succeeded_builds: Some(min),
        ..
    }) = build_log_retention
    {
        if builds > 0 && min > builds {
            r.problem(
                &join(at, "build_log_retention"),
                format!("minimum_succeeded_builds ({min}) is greater than builds ({builds})"),
            );
        }
    }
    let plan = match m.get("plan") {
        Some(p) => parse_plan(r, p, &join(at, "plan")),
        None => Vec::new(),
    };
    Some(Job {
        name: r.required_str(m, "name", at),
        plan,
        hooks: hooks(r, m, at),
        old_name: r.opt_str(m, "old_name", at),
        public: r.bool(m, "public", at),
        disable_manual_trigger: r.bool(m, "disable_manual_trigger", at),
        disable_reruns: r.bool(m, "disable_reruns", at),
        serial: r.bool(m, "serial", at),
        serial_groups: r.strings(m, "serial_groups", at),
        max_in_flight: r.non_negative(m, "max_in_flight", at),
        interruptible: r.bool(m, "interruptible", at),
        tags: r.strings(m, "tags", at),
        build_logs_to_retain,
        build_log_retention,
    })
}

fn check_every(r: &mut Reader, m: &Mapping, at: &str) -> Option<CheckEvery> {
    let v = m.get("check_every").filter(|v| !v.is_null())?;
    let at = join(at, "check_every");
    match v {
        Value::String(s) if s == "never" => Some(CheckEvery::Never),
        v if r.deferred(v) => None,
        Value::String(s) => match parse_non_negative(s) {
            Ok(d) => Some(CheckEvery::Interval(d)),
            Err(e) => {
                r.problem(&at, e);
                None
            }
        },
        other => {
            r.problem(
                &at,
                format!("must be never or a duration, not {}", kind_of(other)),
            );
            None
        }
    }
}

fn parse_resource(r: &mut Reader, v: &Value, at: &str) -> Option<Resource> {
    let m = r.mapping(v, at, "a resource", RESOURCE_KEYS)?;
    let check_timeout = r.opt_str(m, "check_timeout", at).and_then(|s| {
        if r.deferred(&Value::String(s.clone())) {
            return None;
        }
        parse_non_negative(&s)
            .map_err(|e| r.problem(&join(at, "check_timeout"), e))
            .ok()
    });
    let version = m
        .get("version")
        .filter(|v| !v.is_null())
        .map(|_| r.params(m, "version", at));
    let public = r.bool(m, "public", at);
    let _ = r.bool(m, "expose_build_created_by", at);
    for key in ["old_name", "webhook_token", "icon"] {
        let _ = r.opt_str(m, key, at);
    }
    let other = [
        "old_name",
        "webhook_token",
        "icon",
        "expose_build_created_by",
    ]
    .iter()
    .filter_map(|k| m.get(*k).map(|v| (k.to_string(), v.clone())))
    .collect();
    Some(Resource {
        name: r.required_str(m, "name", at),
        type_: r.required_str(m, "type", at),
        source: r.params(m, "source", at),
        check_every: check_every(r, m, at),
        check_timeout,
        tags: r.strings(m, "tags", at),
        version,
        public,
        other,
    })
}

fn parse_resource_type(r: &mut Reader, v: &Value, at: &str, what: &str) -> Option<ResourceType> {
    let m = r.mapping(v, at, what, RESOURCE_TYPE_KEYS)?;
    Some(ResourceType {
        name: r.required_str(m, "name", at),
        type_: r.required_str(m, "type", at),
        source: r.params(m, "source", at),
        defaults: r.params(m, "defaults", at),
        privileged: r.bool(m, "privileged", at),
        check_every: check_every(r, m, at),
        tags: r.strings(m, "tags", at),
        params: r.params(m, "params", at),
    })
}

fn parse_group(r: &mut Reader, v: &Value, at: &str) -> Option<Group> {
    let m = r.mapping(v, at, "a group", &["name", "jobs", "resources"])?;
    Some(Group {
        name: r.required_str(m, "name", at),
        jobs: r.strings(m, "jobs", at),
        resources: r.strings(m, "resources", at),
    })
}

fn parse_var_source(r: &mut Reader, v: &Value, at: &str) -> Option<VarSource> {
    let m = r.mapping(v, at, "a var source", &["name", "type", "config"])?;
    Some(VarSource {
        name: r.required_str(m, "name", at),
        type_: r.required_str(m, "type", at),
        config: m.get("config").cloned().unwrap_or(Value::Null),
    })
}

fn parse_display(r: &mut Reader, v: &Value) -> Option<Display> {
    let known = ["background_image", "background_filter"];
    let m = r.mapping(v, "display", "display", &known)?;
    let background_image = r.opt_str(m, "background_image", "display");
    if let Some(url) = &background_image {
        if let Some((scheme, _)) = url.split_once("://") {
            if scheme != "http" && scheme != "https" {
                r.problem(
                    "display.background_image",
                    "scheme must be either http, https or relative",
                );
            }
        }
    }
    Some(Display {
        background_image,
        background_filter: r.opt_str(m, "background_filter", "display"),
    })
}
