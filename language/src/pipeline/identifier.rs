//! The rule for the names a pipeline config gives (jobs, resources,
//! resource types, prototypes, groups, var sources, steps and build-local
//! vars), after Concourse's `atc.ValidateIdentifier`.
//!
//! Two levels:
//! - **Refused** (a problem naming the field): what no API path or `fly`
//!   argument could name, or what would show other than it is: an empty or
//!   blank name, `/` (a path separator: `-j PIPELINE/JOB` would be
//!   ambiguous), `.` or `..` (clients resolve them as path segments),
//!   control characters, and invisible format characters — bidirectional
//!   overrides and isolates (U+202A–U+202E, U+2066–U+2069), marks
//!   (U+200E, U+200F, U+061C), zero-width characters (U+200B–U+200D,
//!   U+2060–U+2064, U+FEFF), the soft hyphen and tag characters — and more
//!   than [`MAX_NAME`] bytes.
//! - **Warned** (as Concourse warns, so pipelines teams already run keep
//!   setting): a name of only digits, or one that does not start with a
//!   lowercase letter or a digit or holds other than lowercase letters,
//!   digits, `-`, `_` and `.` (uppercase, spaces, ...). Concourse's
//!   "lowercase letter" is Unicode's Ll, Lt, Lm and Lo; here it is a
//!   letter that is not uppercase (`char::is_alphabetic` and not
//!   `char::is_uppercase`), which agrees on every letter but a few marks.
//!
//! Concourse checks the names of jobs, resources, resource types,
//! prototypes, groups, var sources and steps (`get`, `put`, `task`,
//! `load_var`, `set_pipeline`); Gantry does too, and refuses by the first
//! rule an `across` var as well (which Concourse leaves unchecked, so it is
//! not warned about). A name still holding an unfilled var (`((env))-deploy`,
//! validated without vars) is checked once its vars are filled.

/// The longest name of a job, resource, resource type, group or step: the
/// bound the API puts on the names in its paths (`.../jobs/{job}`).
pub const MAX_NAME: usize = 128;

/// Whether `c` is a format character that changes how text around it shows
/// without showing itself (Unicode's Cf category, the ones in use).
fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// Concourse's identifier letter: Ll, Lt, Lm or Lo (approximated, see the
/// module's docs) or an ASCII digit.
fn is_identifier_start(c: char) -> bool {
    c.is_ascii_digit() || (c.is_alphabetic() && !c.is_uppercase())
}

/// The refusal of a name given at field `at` (`jobs[2].name`), if any: see
/// the module's docs.
pub(crate) fn refusal(at: &str, name: &str) -> Option<String> {
    let why = if name.is_empty() {
        "must not be empty".to_string()
    } else if name.trim().is_empty() {
        "must not be only whitespace".to_string()
    } else if name.len() > MAX_NAME {
        format!("is {} bytes: the limit is {}", name.len(), MAX_NAME)
    } else if name == "." || name == ".." {
        format!("{name:?} cannot be named in a path")
    } else if let Some(c) = name
        .chars()
        .find(|&c| c == '/' || c.is_control() || is_invisible_format(c))
    {
        let what = if c == '/' {
            "'/' (a path separator)".to_string()
        } else if c.is_control() {
            format!("the control character U+{:04X}", c as u32)
        } else {
            format!("the invisible format character U+{:04X}", c as u32)
        };
        format!("must not hold {what}")
    } else {
        return None;
    };
    Some(format!("{at}: {why}"))
}

/// Concourse's warning about a name given at `at`, if any (its wording).
pub(crate) fn warning(at: &str, name: &str) -> Option<String> {
    let reason = if name.bytes().all(|b| b.is_ascii_digit()) {
        "cannot be just numbers".to_string()
    } else if !name.starts_with(is_identifier_start) {
        "must start with a lowercase letter or a number".to_string()
    } else if let Some(c) = name
        .chars()
        .skip(1)
        .find(|&c| !(is_identifier_start(c) || matches!(c, '-' | '_' | '.')))
    {
        format!("illegal character '{c}'")
    } else {
        return None;
    };
    Some(format!(
        "{at}: '{name}' is not a valid identifier: {reason}"
    ))
}

/// Checks a name given at `at`: a refusal goes to `problems`; else, when
/// `warn`, Concourse's warning to `warnings`. A name holding vars still
/// unfilled is left for when they are.
pub(crate) fn check(
    at: &str,
    name: &str,
    warn: bool,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    if !super::vars::find_vars(name).is_empty() {
        return;
    }
    if let Some(p) = refusal(at, name) {
        problems.push(p);
    } else if warn {
        warnings.extend(warning(at, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_no_path_can_carry_are_refused_naming_the_field() {
        for bad in [
            "",
            " ",
            "\t ",
            "a/b",
            "../../x",
            ".",
            "..",
            "a\0b",
            "a\u{1b}b",
            "a\u{7f}",
            "a\u{85}",
            "evil\u{202E}gnp.exe",
            "a\u{2066}b",
            "a\u{200E}",
            "a\u{200B}b",
            "\u{FEFF}a",
        ] {
            let r = refusal("jobs[2].name", bad);
            assert!(
                r.as_deref()
                    .is_some_and(|r| r.starts_with("jobs[2].name: ")),
                "{bad:?}: {r:?}"
            );
        }
        assert!(refusal("x", &"a".repeat(129)).is_some());
    }

    #[test]
    fn concourse_style_breaks_are_warnings_only() {
        for (name, reason) in [
            ("Build", "must start with a lowercase letter or a number"),
            ("_x", "must start with a lowercase letter or a number"),
            ("my job", "illegal character ' '"),
            ("aB", "illegal character 'B'"),
            ("123", "cannot be just numbers"),
            (" a", "must start with a lowercase letter or a number"),
        ] {
            assert_eq!(refusal("jobs[0].name", name), None, "{name:?}");
            let w = warning("jobs[0].name", name).unwrap_or_default();
            assert!(w.ends_with(reason), "{name:?}: {w}");
            assert!(w.starts_with("jobs[0].name: "), "{w}");
        }
        for fine in [
            "build",
            "unit-tests",
            "a.b_c",
            "1st",
            "日本語",
            "ünïcode",
            "a..b",
        ] {
            assert_eq!(refusal("x", fine), None, "{fine:?}");
            assert_eq!(warning("x", fine), None, "{fine:?}");
        }
    }

    #[test]
    fn a_name_holding_an_unfilled_var_is_left_for_later() {
        let (mut problems, mut warnings) = (Vec::new(), Vec::new());
        check(
            "jobs[0].name",
            "((env))/Deploy",
            true,
            &mut problems,
            &mut warnings,
        );
        assert!(problems.is_empty() && warnings.is_empty());
        check("jobs[0].name", "a/b", true, &mut problems, &mut warnings);
        assert_eq!(problems.len(), 1);
        check("jobs[0].name", "Build", true, &mut problems, &mut warnings);
        assert_eq!(warnings.len(), 1);
        check(
            "across[0].var",
            "Build",
            false,
            &mut problems,
            &mut warnings,
        );
        assert_eq!(warnings.len(), 1);
    }
}
