//! `gantry validate-plan FILE [-v NAME=VALUE]... [-l VARS.yml]...`: checks a
//! Concourse pipeline (or a bare plan) and prints every problem, one per
//! line. Without `-v` or `-l` vars need not be filled (as with `fly
//! validate-pipeline`); with them, every var must be.

use std::path::{Path, PathBuf};

use gantry_language::pipeline::{load_warned, Document, Vars};

/// Runs the check; returns the exit code (0 valid, 1 not).
pub fn validate_plan(file: &Path, var_flags: &[String], var_files: &[PathBuf]) -> i32 {
    let fail = |message: String| {
        eprintln!("{}: {message}", file.display());
        1
    };
    let vars = if var_flags.is_empty() && var_files.is_empty() {
        None
    } else {
        match read_vars(var_flags, var_files) {
            Ok(vars) => Some(vars),
            Err(e) => return fail(e),
        }
    };
    let text = match super::read_bounded::read_document(file, "pipeline config") {
        Ok(t) => t,
        Err(e) => return fail(format!("{e:#}")),
    };
    let (loaded, warnings) = load_warned(&text, vars.as_ref());
    // Accepted, but not taken as written: said, not refused.
    for w in warnings {
        eprintln!("warning: {}: {w}", file.display());
    }
    match loaded {
        Ok(Document::Pipeline(p)) => {
            crate::outln!(
                "{}: valid pipeline ({} {}, {} {})",
                file.display(),
                p.jobs.len(),
                plural(p.jobs.len(), "job"),
                p.resources.len(),
                plural(p.resources.len(), "resource"),
            );
            0
        }
        Ok(Document::Plan(steps)) => {
            crate::outln!(
                "{}: valid plan ({} {})",
                file.display(),
                steps.len(),
                plural(steps.len(), "step")
            );
            0
        }
        Err(problems) => {
            for p in problems {
                eprintln!("{}: {p}", file.display());
            }
            1
        }
    }
}

/// The vars of `-l` files (in order) then `-v` flags, later ones
/// overriding earlier ones; or the one problem found.
pub fn read_vars(var_flags: &[String], var_files: &[PathBuf]) -> Result<Vars, String> {
    read_typed_vars(var_flags, &[], var_files)
}

/// [`read_vars`] with `-y NAME=YAML` flags too (their values read as
/// YAML, as with `fly -y`), applied after the `-v` ones.
pub fn read_typed_vars(
    var_flags: &[String],
    yaml_flags: &[String],
    var_files: &[PathBuf],
) -> Result<Vars, String> {
    let mut vars = Vars::new();
    for f in var_files {
        let text =
            super::read_bounded::read_document(f, "vars file").map_err(|e| format!("{e:#}"))?;
        vars.load_yaml(&text)
            .map_err(|e| format!("vars file {}: {e}", f.display()))?;
    }
    for flag in var_flags {
        vars.set_flag(flag)?;
    }
    for flag in yaml_flags {
        vars.set_yaml_flag(flag)?;
    }
    Ok(vars)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}
