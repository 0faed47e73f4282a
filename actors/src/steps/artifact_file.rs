//! Reading one file out of an artifact of the build (`load_var`'s file, a
//! `task`'s `file:`), on the web node: the artifact named by the path's
//! first segment is found among the build's artifacts by name and read as
//! a plain tar stream from the artifact store, or from the worker holding
//! it (a job build's task output).

use std::io::Read;
use std::path::{Component, Path};

use futures::StreamExt;
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::error::EngineError;
use gantry_wire::spec::Encoding;

use super::BuildScope;

/// Largest file read out of an artifact (var files and task configs are
/// small; a larger one is an error naming it).
pub(super) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Splits `ARTIFACT/path/in/it` into the artifact's name and the path.
pub(super) fn split_artifact_path(file: &str) -> Result<(&str, &str), EngineError> {
    match file.split_once('/') {
        Some((artifact, path)) if !artifact.is_empty() && !path.trim_matches('/').is_empty() => {
            Ok((artifact, path))
        }
        _ => Err(EngineError::Invalid(format!(
            "file {file:?}: expected ARTIFACT/PATH (an artifact of the build, then the file's path in it)"
        ))),
    }
}

/// The contents of `file` (`ARTIFACT/PATH`) in the build's artifact of that
/// name. A missing artifact or file, a file that is not a regular file or
/// is larger than [`MAX_FILE_BYTES`], is an error naming it.
pub(crate) async fn read_artifact_file(
    scope: &BuildScope,
    file: &str,
) -> Result<Vec<u8>, EngineError> {
    let (artifact, path) = split_artifact_path(file)?;
    let id = scope.named.get(artifact).ok_or_else(|| {
        EngineError::Invalid(format!(
            "file {file:?}: the build has no artifact {artifact:?} (no earlier step produced it)"
        ))
    })?;
    let stream = scope
        .streams
        .open_artifact(Some(&scope.team), &id, Encoding::Raw)
        .await?;
    let reader = SyncIoBridge::new(StreamReader::new(stream.map(|c| c)));
    let wanted: Vec<String> = normal_components(Path::new(path));
    let file = file.to_string();
    tokio::task::spawn_blocking(move || find_in_tar(reader, &wanted, &file))
        .await
        .map_err(|e| EngineError::Invalid(format!("reading the artifact: {e}")))?
}

/// The path's normal components (`.` and empty ones dropped).
fn normal_components(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

/// Finds `wanted` in the tar stream `reader` and reads it whole.
fn find_in_tar(reader: impl Read, wanted: &[String], file: &str) -> Result<Vec<u8>, EngineError> {
    let bad = |e: std::io::Error| {
        EngineError::Invalid(format!("file {file:?}: reading the artifact: {e}"))
    };
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?;
        if normal_components(&path) != wanted {
            continue;
        }
        let kind = entry.header().entry_type();
        if !kind.is_file() {
            return Err(EngineError::Invalid(format!(
                "file {file:?}: not a regular file in the artifact"
            )));
        }
        let size = entry.size();
        if size > MAX_FILE_BYTES {
            return Err(EngineError::Invalid(format!(
                "file {file:?}: {size} bytes, more than the {MAX_FILE_BYTES} a var or task file may have"
            )));
        }
        let mut data = Vec::with_capacity(size as usize);
        entry
            .take(MAX_FILE_BYTES)
            .read_to_end(&mut data)
            .map_err(bad)?;
        return Ok(data);
    }
    Err(EngineError::Invalid(format!(
        "file {file:?}: no such file in the artifact"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_files::testing::tar_of;

    #[test]
    fn a_file_is_found_by_path_and_a_missing_one_named() {
        let tar = tar_of(&[("./a.txt", b"A"), ("dir/v.json", b"{\"k\": 1}")]);
        let wanted = normal_components(Path::new("dir/v.json"));
        assert_eq!(
            find_in_tar(&tar[..], &wanted, "out/dir/v.json").unwrap(),
            b"{\"k\": 1}"
        );
        let wanted = normal_components(Path::new("./a.txt"));
        assert_eq!(find_in_tar(&tar[..], &wanted, "out/a.txt").unwrap(), b"A");
        let err = find_in_tar(&tar[..], &["nope".into()], "out/nope").unwrap_err();
        assert_eq!(
            err.to_string(),
            "file \"out/nope\": no such file in the artifact"
        );
        assert!(split_artifact_path("just-a-name").is_err());
        assert_eq!(split_artifact_path("a/b/c").unwrap(), ("a", "b/c"));
    }
}
