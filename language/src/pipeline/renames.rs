//! `old_name` of jobs and resources: the renames a pipeline's config asks
//! for, checked and put in the order they can be applied, as Concourse's
//! `updateJobsName` / `updateResourcesName` (`atc/db/team.go`) order them.
//!
//! A rename moves the history kept under the old name (a job's builds and
//! their numbers, a resource's versions, pin and disabled versions) to the
//! new one; an old name that names nothing stored is ignored, as in
//! Concourse. What Concourse accepts but cannot mean is refused here,
//! each problem with its path (`jobs[new].old_name`):
//! - two entries with one `old_name` (both cannot keep one history);
//! - an `old_name` that names an entry still in the config under that
//!   name (its history cannot both stay and move);
//! - a cycle (`a` from `b`, `b` from `a`): Concourse's "job name swapping
//!   is not supported at this time".
//!
//! A chain (`c` from `b`, `b` from `a`) is kept, applied `b`→`c` first.

use std::collections::{HashMap, HashSet};

use super::validate::entry_at;
use super::Pipeline;

/// One rename: the history under `old` goes to `new`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    /// The former name (`old_name`).
    pub old: String,
    /// The name in the config now.
    pub new: String,
}

/// The renames of a pipeline, each list in the order to apply it (a name
/// is renamed away before another entry takes it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renames {
    /// Of its jobs.
    pub jobs: Vec<Rename>,
    /// Of its resources.
    pub resources: Vec<Rename>,
}

/// The renames `pipeline` asks for, or every problem with them.
pub fn renames(pipeline: &Pipeline) -> Result<Renames, Vec<String>> {
    let mut problems = Vec::new();
    let jobs = ordered(
        "jobs",
        "job",
        pipeline
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), j.old_name.as_deref())),
        &mut problems,
    );
    let resources = ordered(
        "resources",
        "resource",
        pipeline.resources.iter().map(|r| {
            let old = r.other.get("old_name").and_then(|v| v.as_str());
            (r.name.as_str(), old)
        }),
        &mut problems,
    );
    if problems.is_empty() {
        Ok(Renames { jobs, resources })
    } else {
        Err(problems)
    }
}

/// The renames of one section (`section`, entries of `kind`): each entry's
/// (name, old_name), checked (problems pushed) and ordered so that a
/// rename whose new name is another's old name comes after that one.
fn ordered<'a>(
    section: &str,
    kind: &str,
    entries: impl Iterator<Item = (&'a str, Option<&'a str>)>,
    problems: &mut Vec<String>,
) -> Vec<Rename> {
    let entries: Vec<(&str, Option<&str>)> = entries.collect();
    let names: HashSet<&str> = entries.iter().map(|(n, _)| *n).collect();
    let mut wanted: Vec<(usize, &str, &str)> = Vec::new();
    let mut by_old: HashMap<&str, &str> = HashMap::new();
    for (i, (name, old)) in entries.iter().enumerate() {
        let Some(old) = old.filter(|o| !o.is_empty() && o != name) else {
            continue;
        };
        let at = format!("{}.old_name", entry_at(section, i, name));
        if let Some(first) = by_old.insert(old, name) {
            problems.push(format!(
                "{at}: {kind} {first:?} already has old_name {old:?}: one history cannot go to two {kind}s"
            ));
            continue;
        }
        wanted.push((i, name, old));
    }
    // An old name still in the config is fine only when that entry is
    // itself renamed from another (a chain); else its history would both
    // stay and move.
    let renamed: HashSet<&str> = wanted.iter().map(|(_, new, _)| *new).collect();
    for (i, name, old) in &wanted {
        if names.contains(old) && !renamed.contains(old) {
            problems.push(format!(
                "{}.old_name: {kind} {old:?} is still in the pipeline: remove it, or drop old_name to keep both",
                entry_at(section, *i, name)
            ));
        }
    }
    // Order: a rename onto `new` waits for the rename away from `new`.
    let away: HashMap<&str, usize> = wanted
        .iter()
        .enumerate()
        .map(|(k, (_, _, old))| (*old, k))
        .collect();
    let mut order = Vec::with_capacity(wanted.len());
    // 0: not placed, 1: being placed, 2: placed.
    let mut state = vec![0u8; wanted.len()];
    let mut cycle = false;
    for start in 0..wanted.len() {
        let mut chain = Vec::new();
        let mut k = start;
        loop {
            match state[k] {
                2 => break,
                1 => {
                    cycle = true;
                    break;
                }
                _ => {}
            }
            state[k] = 1;
            chain.push(k);
            match away.get(wanted[k].1) {
                Some(&next) => k = next,
                None => break,
            }
        }
        for k in chain.into_iter().rev() {
            state[k] = 2;
            order.push(k);
        }
    }
    if cycle {
        problems.push(format!(
            "{section}: {kind} name swapping is not supported at this time (old_name goes round in a cycle)"
        ));
    }
    order
        .into_iter()
        .map(|k| Rename {
            old: wanted[k].2.to_string(),
            new: wanted[k].1.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Pipeline {
        Pipeline::load_leaving(yaml, &Default::default())
            .unwrap_or_else(|p| panic!("{p:?}"))
            .0
    }

    fn job(name: &str, old: Option<&str>) -> String {
        let old = old
            .map(|o| format!("  old_name: {o}\n"))
            .unwrap_or_default();
        format!("- name: {name}\n{old}  plan: [{{task: t, config: {{platform: linux, run: {{path: echo}}}}}}]\n")
    }

    fn jobs(js: &[(&str, Option<&str>)]) -> Result<Renames, Vec<String>> {
        let text: String = js.iter().map(|(n, o)| job(n, *o)).collect();
        renames(&load(&format!("jobs:\n{text}")))
    }

    fn pairs(r: &[Rename]) -> Vec<(&str, &str)> {
        r.iter().map(|r| (r.old.as_str(), r.new.as_str())).collect()
    }

    #[test]
    fn a_rename_and_its_own_name_are_read() {
        let r = jobs(&[
            ("new", Some("old")),
            ("same", Some("same")),
            ("plain", None),
        ])
        .unwrap();
        assert_eq!(pairs(&r.jobs), [("old", "new")]);
        let p = load(
            "resources:\n- name: r2\n  old_name: r1\n  type: mock\n  source: {}\njobs:\n- name: j\n  plan: [{get: r2}]\n",
        );
        assert_eq!(pairs(&renames(&p).unwrap().resources), [("r1", "r2")]);
    }

    #[test]
    fn a_chain_is_applied_from_its_end() {
        let r = jobs(&[("b", Some("a")), ("c", Some("b"))]).unwrap();
        assert_eq!(pairs(&r.jobs), [("b", "c"), ("a", "b")]);
    }

    #[test]
    fn a_swap_is_refused_as_concourse_refuses_it() {
        let e = jobs(&[("a", Some("b")), ("b", Some("a"))]).unwrap_err();
        assert!(
            e.iter()
                .any(|p| p.contains("job name swapping is not supported at this time")),
            "{e:?}"
        );
    }

    #[test]
    fn an_old_name_still_in_the_config_is_refused_naming_the_field() {
        let e = jobs(&[("a", None), ("b", Some("a"))]).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("jobs[b].old_name: job \"a\" is still in the pipeline"),
            "{e:?}"
        );
    }

    #[test]
    fn two_entries_with_one_old_name_are_refused() {
        let e = jobs(&[("b", Some("a")), ("c", Some("a"))]).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("jobs[c].old_name: job \"b\" already has old_name \"a\""),
            "{e:?}"
        );
    }
}
