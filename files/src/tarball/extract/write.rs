//! Writing an extracted entry beneath the destination: its parent
//! directories made or entered (never through a symlink), what stood at its
//! name cleared, then the directory, file, symlink or hard link made; the
//! directories' attributes set last.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::super::attrs::Attrs;
use super::super::entry_path::display_name;
use super::super::TarError;
use super::{refuse, Extractor, Kind};
use crate::dir_fd::{BeneathError, Dir, Kind as DiskKind};

impl Extractor<'_> {
    /// Makes sure every parent of `comps` is a real directory (creating
    /// missing ones), never a symlink; returns the entry's parent directory,
    /// opened (`None` when validating). Each parent is opened from its own
    /// parent's descriptor with `O_NOFOLLOW`: a directory swapped for a
    /// symlink meanwhile is refused, never followed.
    pub(super) fn ensure_parents(
        &mut self,
        comps: &[&[u8]],
        name: &str,
    ) -> Result<Option<Dir>, TarError> {
        let parents = &comps[..comps.len() - 1];
        let parent_key = parents.join(&b'/');
        if let Some((key, dir)) = &self.parent {
            if *key == parent_key {
                return dir
                    .try_clone()
                    .map(Some)
                    .map_err(|e| Self::write_error(name, e));
            }
        }
        let mut cur = match self.dest {
            Some(d) => Some(d.try_clone().map_err(|e| Self::write_error(name, e))?),
            None => None,
        };
        let mut key: Vec<u8> = Vec::new();
        for c in parents {
            if !key.is_empty() {
                key.push(b'/');
            }
            key.extend_from_slice(c);
            match self.model.get(&key) {
                Some(Kind::Symlink) => {
                    return Err(refuse(
                        name,
                        format!("its parent {:?} is a symlink", display_name(&key)),
                    ))
                }
                Some(Kind::File) => {
                    return Err(refuse(
                        name,
                        format!("its parent {:?} is not a directory", display_name(&key)),
                    ))
                }
                Some(Kind::Dir) | None => {}
            }
            if let Some(dir) = &cur {
                cur = Some(Self::open_parent(dir, c, &key, name)?);
            }
            self.model.insert(key.clone(), Kind::Dir);
        }
        if let Some(dir) = &cur {
            let kept = dir.try_clone().map_err(|e| Self::write_error(name, e))?;
            self.parent = Some((parent_key, kept));
        }
        Ok(cur)
    }

    /// Opens (creating it if missing) the directory `c` in `dir`, the
    /// parent `key` of the entry `name`; a symlink or a non-directory there
    /// is refused.
    pub(super) fn open_parent(
        dir: &Dir,
        c: &[u8],
        key: &[u8],
        name: &str,
    ) -> Result<Dir, TarError> {
        let shown = display_name(key);
        dir.enter(
            OsStr::from_bytes(c),
            Path::new(OsStr::from_bytes(key)),
            true,
        )
        .map_err(|e| match e {
            BeneathError::Symlink { .. } => {
                refuse(name, format!("its parent {shown:?} is a symlink"))
            }
            BeneathError::NotADirectory { .. } => {
                refuse(name, format!("its parent {shown:?} is not a directory"))
            }
            BeneathError::Changing { .. } => refuse(
                name,
                format!("its parent {shown:?} keeps changing while it is opened"),
            ),
            other => Self::write_error(name, other.into()),
        })
    }

    /// Clears the way for a new entry `last` in `parent`: a directory stays
    /// (only if the new entry is one too), anything else is removed (never
    /// followed). Returns whether a directory is there.
    pub(super) fn clear(
        parent: &Dir,
        last: &OsStr,
        new_is_dir: bool,
        name: &str,
    ) -> Result<bool, TarError> {
        match parent.stat(last) {
            Ok(s) if s.kind == DiskKind::Dir => {
                if new_is_dir {
                    Ok(true)
                } else {
                    Err(refuse(name, "it would replace a directory"))
                }
            }
            Ok(_) => {
                parent
                    .remove_file(last)
                    .map_err(|e| Self::write_error(name, e))?;
                Ok(false)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Self::write_error(name, e)),
        }
    }

    /// Makes the directory `last` in `parent`; one already there stays.
    pub(super) fn make_dir(parent: &Dir, last: &OsStr, name: &str) -> Result<(), TarError> {
        if !Self::clear(parent, last, true, name)? {
            parent
                .create_dir(last, 0o777)
                .map_err(|e| Self::write_error(name, e))?;
        }
        Ok(())
    }

    /// Writes the regular file `last` in `parent` (`at`) from the entry's
    /// data, with its attributes; without `at` (validating) only reads and
    /// counts the data.
    pub(super) fn write_file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        declared: u64,
        at: Option<(&Dir, &OsStr)>,
        attrs: &Attrs,
        name: &str,
    ) -> Result<(), TarError> {
        let Some((parent, last)) = at else {
            return self.copy_data(entry, declared, None, true, name).map(drop);
        };
        Self::clear(parent, last, false, name)?;
        let mut file = parent
            .create_file(last, 0o600)
            .map_err(|e| Self::write_error(name, e))?;
        self.copy_data(entry, declared, Some(&mut file), true, name)?;
        attrs
            .apply(&file, self.root)
            .map_err(|e| Self::write_error(name, e))
    }

    /// Makes `last` in `parent` a symlink to `target` (already checked),
    /// with the entry's owner (as root) and mtime, both best effort.
    pub(super) fn make_symlink(
        &self,
        parent: &Dir,
        last: &OsStr,
        target: &[u8],
        attrs: &Attrs,
        name: &str,
    ) -> Result<(), TarError> {
        Self::clear(parent, last, false, name)?;
        parent
            .symlink(OsStr::from_bytes(target), last)
            .map_err(|e| Self::write_error(name, e))?;
        attrs.apply_to_symlink(parent, last, self.root);
        Ok(())
    }

    /// Makes `last` in `parent` a hardlink to the earlier file `tkey` of the
    /// archive, opened again beneath `dest` without following a symlink; it
    /// must still be a regular file.
    pub(super) fn make_hardlink(
        dest: &Dir,
        parent: &Dir,
        last: &OsStr,
        tkey: &[u8],
        name: &str,
    ) -> Result<(), TarError> {
        let not_a_file = || {
            refuse(
                name,
                format!(
                    "hardlink target {:?} is not a regular file",
                    display_name(tkey)
                ),
            )
        };
        let tpath = Path::new(OsStr::from_bytes(tkey));
        let (Some(tparent), Some(tlast)) = (tpath.parent(), tpath.file_name()) else {
            return Err(not_a_file());
        };
        let tdir = dest.dir_beneath(tparent).map_err(|_| not_a_file())?;
        match tdir.stat(tlast) {
            Ok(s) if s.kind == DiskKind::File => {}
            _ => return Err(not_a_file()),
        }
        Self::clear(parent, last, false, name)?;
        parent
            .hard_link(&tdir, tlast, last)
            .map_err(|e| Self::write_error(name, e))
    }

    /// Applies the directories' modes and mtimes, deepest first.
    pub(super) fn finish_dirs(&mut self) -> Result<(), TarError> {
        let Some(dest) = self.dest else {
            return Ok(());
        };
        let mut dirs: Vec<(Vec<u8>, Attrs)> = self.dirs.drain().collect();
        dirs.sort_by_key(|(k, _)| std::cmp::Reverse(k.iter().filter(|b| **b == b'/').count()));
        for (key, attrs) in dirs {
            let name = display_name(&key);
            let dir = dest
                .dir_beneath(Path::new(OsStr::from_bytes(&key)))
                .map_err(|e| Self::write_error(&name, e.into()))?;
            attrs
                .apply(dir.as_file(), self.root)
                .map_err(|e| Self::write_error(&name, e))?;
        }
        Ok(())
    }
}
