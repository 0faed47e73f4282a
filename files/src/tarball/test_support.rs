//! Helpers shared by the unit tests of tar handling: streams of bytes,
//! listings of trees and archives, refusals.

use std::fs;
use std::io::Read;
use std::path::Path;

use tar::EntryType;

use super::{TarError, UnpackSummary};

pub(super) use crate::testing::{collect, noise as pseudo_random, stream_of};

/// The sorted names in `dir`.
pub(super) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The entries of a raw tar: name and contents (a symlink's target for
/// a symlink).
pub(super) fn listing(data: Vec<u8>) -> Vec<(String, Vec<u8>)> {
    let mut ar = tar::Archive::new(&data[..]);
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = String::from_utf8(e.path_bytes().into_owned()).unwrap();
            let mut body = Vec::new();
            if e.header().entry_type() == EntryType::Symlink {
                body = e.link_name_bytes().unwrap().into_owned();
            } else {
                e.read_to_end(&mut body).unwrap();
            }
            (name, body)
        })
        .collect()
}

/// The entry and reason of a refusal (panics on anything else).
pub(super) fn unsafe_reason(r: &Result<UnpackSummary, TarError>) -> (String, String) {
    match r {
        Err(TarError::Unsafe { entry, reason }) => (entry.clone(), reason.clone()),
        other => panic!("expected Unsafe, got {other:?}"),
    }
}
