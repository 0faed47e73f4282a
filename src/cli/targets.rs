//! fly-like targets: `gantry login -c URL -n TEAM -t NAME` saves a web
//! node's URL, a team and a signed-in token under a name in `~/.gantryrc`
//! (YAML, mode 0600, rewritten whole through a temporary file); `-t NAME`
//! (or `GANTRY_TARGET`) on any verb acts through it. A target fills
//! `GANTRY_URL`, `GANTRY_TOKEN` and `GANTRY_TEAM` before the command line
//! is parsed, where they are not set, so `--url`, `--token` and `--team`
//! still win. With no target named and no token given, the target saved
//! for the URL the command uses (`--url`, `GANTRY_URL` or the default) is
//! used: the one `quickstart` saves for its node, so the README's first
//! commands need no sign-in.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// One saved target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The web node's URL.
    pub api: String,
    /// The team the token acts in.
    pub team: String,
    /// The token (a sign-in's).
    pub token: String,
    /// Who signed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Unix ms after which the token is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

/// The file's contents.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Targets {
    /// Targets by name.
    #[serde(default)]
    pub targets: BTreeMap<String, Target>,
}

/// `~/.gantryrc` (`$HOME/.gantryrc`).
pub fn path() -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set: cannot find ~/.gantryrc")?;
    Ok(PathBuf::from(home).join(".gantryrc"))
}

impl Targets {
    /// Reads the file (none yet: no targets).
    pub fn load() -> anyhow::Result<Self> {
        let path = path()?;
        match std::fs::File::open(&path) {
            // Within the bounds of every YAML document the CLI reads.
            Ok(_) => {
                let text = super::read_bounded::read_document(&path, "targets file")?;
                gantry_actors::api::parse_yaml_value(&text, "targets file")
                    .map_err(|e| anyhow::anyhow!("{} is not a targets file: {e}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Writes the file whole, owner-only, through a temporary file renamed
    /// over it (a crash leaves the old file or the new, never half).
    pub fn save(&self) -> anyhow::Result<()> {
        let text = serde_yaml::to_string(self)?;
        crate::private_files::write_private(&path()?, text.as_bytes())
    }

    /// The target named `name`, or an error listing the known ones.
    pub fn get(&self, name: &str) -> anyhow::Result<&Target> {
        self.targets.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.targets.keys().map(String::as_str).collect();
            anyhow::anyhow!(
                "unknown target {name:?} (known: {}); sign in with `gantry login -c URL -n TEAM -t {name}`",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )
        })
    }
}

/// The target a command line names: `-t NAME`, `--target NAME`,
/// `--target=NAME`, `-tNAME` or `GANTRY_TARGET`.
fn named_target(args: &[std::ffi::OsString]) -> Option<String> {
    let mut it = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = it.next() {
        if arg == "--" {
            break;
        }
        if arg == "-t" || arg == "--target" {
            return it.next();
        }
        if let Some(v) = arg.strip_prefix("--target=") {
            return Some(v.to_string());
        }
        if let Some(v) = arg
            .strip_prefix("-t")
            .filter(|v| !v.is_empty() && !arg.starts_with("--"))
        {
            return Some(v.to_string());
        }
    }
    std::env::var("GANTRY_TARGET")
        .ok()
        .filter(|t| !t.is_empty())
}

/// The value of `--url` on a command line, if given.
fn flag_value(args: &[std::ffi::OsString], flag: &str) -> Option<String> {
    let mut it = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned());
    let with_eq = format!("{flag}=");
    while let Some(arg) = it.next() {
        if arg == "--" {
            break;
        }
        if arg == flag {
            return it.next();
        }
        if let Some(v) = arg.strip_prefix(&with_eq) {
            return Some(v.to_string());
        }
    }
    None
}

/// The verb of a command line: its first word that is neither a flag nor
/// the value of a global flag that takes one.
fn verb(args: &[std::ffi::OsString]) -> Option<String> {
    let mut it = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--url" | "--token" | "-t" | "--target" | "--log-format" => {
                it.next();
            }
            a if a.starts_with('-') => {}
            _ => return Some(arg),
        }
    }
    None
}

/// The servers, which act with no target: a saved token must not reach
/// their environment (nor the processes they start).
const SERVERS: [&str; 3] = ["web", "worker", "quickstart"];

/// The one target saved for `url`, if exactly one is.
fn target_for_url<'a>(targets: &'a Targets, url: &str) -> Option<&'a Target> {
    let url = url.trim_end_matches('/');
    let mut found = targets.targets.values().filter(|t| t.api == url);
    match (found.next(), found.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// Before the command line is parsed: fills `GANTRY_URL`, `GANTRY_TOKEN`
/// and `GANTRY_TEAM` from the named target where they are not set (with
/// none named and no token given: from the target saved for the URL the
/// command uses, when one is). `gantry login` makes the target, so it is
/// left alone.
pub fn apply(args: &[std::ffi::OsString]) -> anyhow::Result<()> {
    let verb = verb(args);
    if verb.as_deref() == Some("login") || verb.as_deref().is_some_and(|v| SERVERS.contains(&v)) {
        return Ok(());
    }
    let Some(name) = named_target(args) else {
        let token_given =
            std::env::var_os("GANTRY_TOKEN").is_some() || flag_value(args, "--token").is_some();
        if token_given {
            return Ok(());
        }
        let url = flag_value(args, "--url")
            .or_else(|| std::env::var("GANTRY_URL").ok())
            .unwrap_or_else(|| "http://127.0.0.1:8080".into());
        // A targets file that cannot be read names no target: the command
        // goes on without one (a server's start must not depend on it).
        if let Some(target) = Targets::load()
            .ok()
            .as_ref()
            .and_then(|t| target_for_url(t, &url))
        {
            for (var, value) in [
                ("GANTRY_TOKEN", &target.token),
                ("GANTRY_TEAM", &target.team),
            ] {
                if std::env::var_os(var).is_none() {
                    // Single-threaded, as below.
                    std::env::set_var(var, value);
                }
            }
        }
        return Ok(());
    };
    let targets = Targets::load()?;
    let target = targets.get(&name)?;
    for (var, value) in [
        ("GANTRY_URL", &target.api),
        ("GANTRY_TOKEN", &target.token),
        ("GANTRY_TEAM", &target.team),
    ] {
        if std::env::var_os(var).is_none() {
            // Single-threaded: nothing else runs before the command line
            // is parsed.
            std::env::set_var(var, value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<std::ffi::OsString> {
        a.iter().map(|s| s.into()).collect()
    }

    #[test]
    fn the_target_of_a_url_is_the_one_saved_for_it() {
        let target = |api: &str| Target {
            api: api.into(),
            team: "main".into(),
            token: format!("t-{api}"),
            user: None,
            expires_at: None,
        };
        let mut t = Targets::default();
        t.targets
            .insert("a".into(), target("http://127.0.0.1:8080"));
        t.targets.insert("b".into(), target("http://h:1"));
        assert_eq!(
            target_for_url(&t, "http://127.0.0.1:8080/").map(|t| t.token.as_str()),
            Some("t-http://127.0.0.1:8080")
        );
        assert!(target_for_url(&t, "http://h:2").is_none());
        // Two targets for one URL: neither is chosen.
        t.targets.insert("c".into(), target("http://h:1"));
        assert!(target_for_url(&t, "http://h:1").is_none());
        assert_eq!(
            flag_value(&args(&["gantry", "builds", "--url=http://x"]), "--url").as_deref(),
            Some("http://x")
        );
        assert_eq!(
            flag_value(&args(&["gantry", "--url", "http://y", "builds"]), "--url").as_deref(),
            Some("http://y")
        );
        assert_eq!(
            verb(&args(&["gantry", "--url", "web", "-t", "x", "quickstart"])).as_deref(),
            Some("quickstart")
        );
        assert_eq!(
            verb(&args(&["gantry", "--wide", "pipelines"])).as_deref(),
            Some("pipelines")
        );
    }

    #[test]
    fn a_target_is_named_by_t_or_target_in_any_place() {
        for line in [
            &["gantry", "-t", "ci", "builds"][..],
            &["gantry", "builds", "--target", "ci"],
            &["gantry", "builds", "--target=ci"],
            &["gantry", "-tci", "builds"],
        ] {
            assert_eq!(named_target(&args(line)).as_deref(), Some("ci"), "{line:?}");
        }
        assert_eq!(
            named_target(&args(&["gantry", "builds", "--", "-t", "x"])),
            None
        );
    }
}
