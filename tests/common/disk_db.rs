//! Comparing what is on disk (workers' work dirs, runc, the artifact
//! store) with the database, exactly: the garbage collector's proof.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::TestDb;

/// Whether runc failed only because a container went away while it
/// looked (its state deleted by a `runc` still finishing).
pub fn runc_lost_a_container(stderr: &str) -> bool {
    stderr.contains("does not exist") || stderr.contains("no such file or directory")
}

/// The ids of runc's containers whose state is under `work/runc`. A
/// container deleted while runc lists them (a `runc` of a killed worker
/// still finishing) makes runc fail: the list is read again, at most 50
/// times.
pub fn runc_ids(work: &Path) -> BTreeSet<String> {
    let root = work.join("runc");
    if !root.exists() {
        return BTreeSet::new();
    }
    let mut tries = 0;
    let out = loop {
        let out = Command::new("runc")
            .arg("--root")
            .arg(&root)
            .args(["list", "-q"])
            .output()
            .expect("runc runs");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        tries += 1;
        if out.status.success() || !runc_lost_a_container(&stderr) || tries == 50 {
            assert!(out.status.success(), "runc list: {stderr}");
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Mount points at or below `dir` (from this process's mount table).
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// The names of the directories in `dir` (none when it does not exist).
pub fn dirs_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Read access to the web node's database.
pub struct DbView {
    rt: tokio::runtime::Runtime,
    pool: sqlx::AnyPool,
}

impl DbView {
    /// Opens the database of the web node whose data dir is `dir/web`.
    pub fn open(dir: &Path, db: &TestDb) -> DbView {
        sqlx::any::install_default_drivers();
        let url = match &db.url {
            Some(u) => u.clone(),
            None => format!("sqlite://{}", dir.join("web/gantry.db").display()),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let pool = rt
            .block_on(
                sqlx::any::AnyPoolOptions::new()
                    .max_connections(1)
                    .connect(&url),
            )
            .expect("the test reads the database");
        DbView { rt, pool }
    }

    /// Rows of `sql` as strings (every column cast to text by the query).
    pub fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        use sqlx::Row as _;
        let rows = self
            .rt
            .block_on(sqlx::query(sql).fetch_all(&self.pool))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.try_get::<String, _>(i).unwrap_or_default())
                    .collect()
            })
            .collect()
    }

    /// `(handle, state)` of the rows of `table` on `worker`.
    pub fn handles(&self, table: &str, worker: &str) -> BTreeMap<String, String> {
        self.rows(&format!(
            "SELECT handle, state FROM {table} WHERE worker = '{worker}'"
        ))
        .into_iter()
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect()
    }
}

/// What one comparison found equal, for the printout.
#[derive(Debug, Default)]
pub struct Counts {
    /// One line per thing compared.
    pub lines: Vec<String>,
}

/// Compares disk, runc and the store with the database once, for the
/// `workers` (name, work dir) and the artifact store at `store_dir`; `Err`
/// names the first difference.
pub fn compare(
    view: &DbView,
    workers: &[(String, PathBuf)],
    store_dir: &Path,
) -> Result<Counts, String> {
    compare_with_store(view, workers, || store_files(store_dir))
}

/// The artifact ids of the files in the directory store `store_dir`;
/// `Err` when temporary files are left.
pub fn store_files(store_dir: &Path) -> Result<BTreeSet<String>, String> {
    let files: BTreeSet<String> = std::fs::read_dir(store_dir)
        .expect("the artifact store")
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        // `.store-id` names the store; it is no artifact.
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.split('.').next().unwrap_or_default().to_string()
        })
        .collect();
    let tmp = dirs_in(&store_dir.join("tmp")).len()
        + std::fs::read_dir(store_dir.join("tmp"))
            .map(|d| d.count())
            .unwrap_or(0);
    if tmp != 0 {
        return Err(format!("store: {tmp} temporary files left"));
    }
    Ok(files)
}

/// [`compare`], with the ids of the artifacts the store holds listed by
/// `stored` (files of a directory, objects of a bucket).
pub fn compare_with_store(
    view: &DbView,
    workers: &[(String, PathBuf)],
    stored: impl FnOnce() -> Result<BTreeSet<String>, String>,
) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let bad_states = view.rows(
        "SELECT 'container', handle, worker, state FROM containers \
         WHERE state IN ('creating', 'destroying') UNION ALL \
         SELECT 'volume', handle, worker, state FROM volumes \
         WHERE state IN ('creating', 'destroying')",
    );
    if let Some(r) = bad_states.first() {
        return Err(format!(
            "{} rows not settled, e.g. {} {} on {} is {}",
            bad_states.len(),
            r[0],
            r[1],
            r[2],
            r[3]
        ));
    }
    let strangers = view.rows(&format!(
        "SELECT handle FROM volumes WHERE worker NOT IN ({0}) UNION ALL \
         SELECT handle FROM containers WHERE worker NOT IN ({0})",
        workers
            .iter()
            .map(|(w, _)| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !strangers.is_empty() {
        return Err(format!("{} rows of unknown workers", strangers.len()));
    }
    for (w, work) in workers {
        let rows_c = view.handles("containers", w);
        let rows_v = view.handles("volumes", w);
        let db_c: BTreeSet<String> = rows_c.keys().cloned().collect();
        let db_v: BTreeSet<String> = rows_v.keys().cloned().collect();
        let disk_c = dirs_in(&work.join("containers"));
        let disk_v = dirs_in(&work.join("volumes"));
        let runc = runc_ids(work);
        let mounted: BTreeSet<String> = mounts_under(&work.join("containers"))
            .iter()
            .filter_map(|m| {
                let rel = m.strip_prefix(&format!("{}/", work.join("containers").display()))?;
                rel.split('/').next().map(str::to_string)
            })
            .collect();
        if disk_c != db_c {
            return Err(format!(
                "{w}: containers on disk {:?} but in the database {:?}",
                diff(&disk_c, &db_c),
                diff(&db_c, &disk_c)
            ));
        }
        if disk_v != db_v {
            return Err(format!(
                "{w}: volumes on disk only {:?}, in the database only {:?}",
                diff(&disk_v, &db_v),
                diff(&db_v, &disk_v)
            ));
        }
        if !runc.is_subset(&db_c) {
            return Err(format!(
                "{w}: runc containers without a row: {:?}",
                diff(&runc, &db_c)
            ));
        }
        if !mounted.is_subset(&db_c) {
            return Err(format!(
                "{w}: mounts of containers without a row: {:?}",
                diff(&mounted, &db_c)
            ));
        }
        counts.lines.push(format!(
            "soak: worker {w}: containers db={} disk={} runc={} mounted={}; volumes db={} disk={}",
            db_c.len(),
            disk_c.len(),
            runc.len(),
            mounted.len(),
            db_v.len(),
            disk_v.len()
        ));
    }
    let in_store: BTreeSet<String> = view
        .rows("SELECT id FROM artifacts WHERE in_store = 1")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    let files = stored()?;
    if files != in_store {
        return Err(format!(
            "store: files only {:?}, database only {:?}",
            diff(&files, &in_store),
            diff(&in_store, &files)
        ));
    }
    let on_workers = view
        .rows("SELECT id FROM artifacts WHERE in_store = 0")
        .len();
    counts.lines.push(format!(
        "soak: artifact store: files={} db_in_store={} db_on_workers_only={on_workers}",
        files.len(),
        in_store.len()
    ));
    Ok(counts)
}

pub fn diff(a: &BTreeSet<String>, b: &BTreeSet<String>) -> Vec<String> {
    a.difference(b).take(5).cloned().collect()
}
