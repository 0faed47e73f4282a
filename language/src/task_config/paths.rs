//! Where inputs, outputs and caches live in the container: a relative path
//! is under the build's working directory, an absolute one is used as it
//! is (as in Concourse's task step).

/// Checks an input, output or cache path. Relative paths must stay in the
/// build directory: Concourse quietly deletes every `..` from them, Gantry
/// refuses them instead of mounting somewhere the author did not mean.
pub(super) fn check_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("must not be empty");
    }
    if path.split('/').any(|c| c == "..") {
        return Err("must not contain '..'");
    }
    if path.starts_with('/') && clean(path) == "/" {
        return Err("must not be the container's root directory");
    }
    Ok(())
}

/// The absolute path in the container of `path` (relative to `work_dir`
/// unless absolute), cleaned: no `.` components, doubled or trailing `/`.
pub fn container_path(work_dir: &str, path: &str) -> String {
    if path.starts_with('/') {
        clean(path)
    } else {
        clean(&format!("{work_dir}/{path}"))
    }
}

/// `path` without empty and `.` components (it never holds `..`).
fn clean(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let joined = parts.join("/");
    if path.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_under_the_work_dir_and_absolute_ones_kept() {
        assert_eq!(container_path("/tmp/build/1", "src"), "/tmp/build/1/src");
        assert_eq!(
            container_path("/tmp/build/1", "./deps//b/"),
            "/tmp/build/1/deps/b"
        );
        assert_eq!(container_path("/tmp/build/1", "."), "/tmp/build/1");
        assert_eq!(container_path("/tmp/build/1", "/opt/out/"), "/opt/out");
    }

    #[test]
    fn paths_leaving_the_build_dir_or_naming_the_root_are_refused() {
        assert!(check_path("a/b").is_ok());
        assert!(check_path("/abs/path").is_ok());
        assert!(check_path("").is_err());
        assert!(check_path("../up").is_err());
        assert!(check_path("a/../../b").is_err());
        assert!(check_path("/").is_err());
        assert!(check_path("/./").is_err());
    }
}
