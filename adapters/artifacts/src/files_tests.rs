//! Tests of the on-disk artifact store: uploads received in one pass, kept
//! as zstd (as sent when they are zstd), refused ones leaving nothing, and
//! artifacts of the earlier plain format still served.

use std::io::{self, Read};
use std::path::Path;

use bytes::Bytes;
use gantry_actors::api::ArtifactStore;
use gantry_actors::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};
use tempfile::TempDir;

use super::ArtifactFiles;

pub(crate) use gantry_files::testing::{collect, noise, stream_of};

/// A tar of a few files, over a MiB, partly compressible.
pub(crate) fn sample_tar() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8], kind: EntryType, link: Option<&str>| {
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o755);
        h.set_mtime(1_600_000_000);
        match link {
            Some(target) => b.append_link(&mut h, path, target).unwrap(),
            None => b.append_data(&mut h, path, data).unwrap(),
        }
    };
    add("dir", b"", EntryType::Directory, None);
    add("dir/noise", &noise(700 * 1024, 7), EntryType::Regular, None);
    add(
        "dir/text",
        &b"hello gantry\n".repeat(40_000),
        EntryType::Regular,
        None,
    );
    add("link", b"", EntryType::Symlink, Some("dir/text"));
    b.into_inner().unwrap()
}

/// A tar holding one file at a raw (unchecked) path.
pub(crate) fn tar_with_path(path: &[u8]) -> Vec<u8> {
    let data = b"pwned";
    let mut h = Header::new_gnu();
    h.as_old_mut().name[..path.len()].copy_from_slice(path);
    h.set_entry_type(EntryType::Regular);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(1024, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn zstd_at(data: &[u8], level: i32) -> Vec<u8> {
    zstd::encode_all(data, level).unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn unzstd(data: &[u8]) -> Vec<u8> {
    zstd::decode_all(data).unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The names in the store's directory (files and `tmp/`'s files).
fn leftovers(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for sub in [dir.to_path_buf(), dir.join("tmp")] {
        for e in std::fs::read_dir(&sub).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                names.push(e.path().display().to_string());
            }
        }
    }
    names.sort();
    names
}

fn store_in(dir: &TempDir) -> ArtifactFiles {
    ArtifactFiles::open(dir.path().to_path_buf()).unwrap()
}

#[tokio::test]
async fn a_zstd_upload_is_stored_and_served_as_sent() {
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir);
    let tar = sample_tar();
    // A level the store does not use: recompressing would change the bytes.
    let sent = zstd_at(&tar, 12);
    assert_ne!(sent, zstd_at(&tar, gantry_files::tarball::ZSTD_LEVEL));
    let stored = store
        .store(stream_of(sent.clone()), Encoding::Zstd, ArtifactKind::Files)
        .await
        .unwrap();
    assert_eq!(stored.size, tar.len() as u64, "the size is the tar's");
    assert_eq!(stored.digest, None, "only images are hashed");
    let on_disk = std::fs::read(dir.path().join(format!("{}.tar.zst", stored.id))).unwrap();
    assert!(
        on_disk == sent,
        "the stored file is byte for byte what was sent"
    );
    let served = collect(store.open(&stored.id, Encoding::Zstd).await.unwrap())
        .await
        .unwrap();
    assert!(
        served == sent,
        "open(zstd) serves the stored bytes unchanged"
    );
    let plain = collect(store.open(&stored.id, Encoding::Raw).await.unwrap())
        .await
        .unwrap();
    assert!(plain == tar, "open(raw) serves the tar");
    let gz = collect(store.open(&stored.id, Encoding::Gzip).await.unwrap())
        .await
        .unwrap();
    assert!(gunzip(&gz) == tar, "open(gzip) serves the tar gzipped");
    let tmp = std::fs::read_dir(dir.path().join("tmp")).unwrap().count();
    assert_eq!(tmp, 0, "nothing left in tmp/");
}

#[tokio::test]
async fn gzip_and_raw_uploads_are_stored_as_zstd_and_round_trip() {
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir);
    let tar = sample_tar();
    for (encoding, sent) in [(Encoding::Raw, tar.clone()), (Encoding::Gzip, gzip(&tar))] {
        let what = encoding.as_str();
        let stored = store
            .store(stream_of(sent), encoding, ArtifactKind::Files)
            .await
            .unwrap();
        assert_eq!(stored.size, tar.len() as u64, "{what}");
        let file = dir.path().join(format!("{}.tar.zst", stored.id));
        let on_disk = std::fs::read(&file).unwrap();
        assert!(on_disk.len() < tar.len(), "{what}: stored compressed");
        assert!(
            unzstd(&on_disk) == tar,
            "{what}: the stored zstd holds the tar"
        );
        let served = collect(store.open(&stored.id, Encoding::Zstd).await.unwrap())
            .await
            .unwrap();
        assert!(served == on_disk, "{what}: open(zstd) serves the file");
        for (enc, undo) in [
            (
                Encoding::Raw,
                (|d: &[u8]| d.to_vec()) as fn(&[u8]) -> Vec<u8>,
            ),
            (Encoding::Gzip, gunzip),
        ] {
            let got = collect(store.open(&stored.id, enc).await.unwrap())
                .await
                .unwrap();
            assert!(undo(&got) == tar, "{what} opened as {}", enc.as_str());
        }
    }
}

#[tokio::test]
async fn an_image_digest_is_the_tars_whatever_the_encoding() {
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir);
    let tar = sample_tar();
    let expected = format!("sha256:{:x}", Sha256::digest(&tar));
    for (encoding, sent) in [
        (Encoding::Raw, tar.clone()),
        (Encoding::Gzip, gzip(&tar)),
        (Encoding::Zstd, zstd_at(&tar, 1)),
        (Encoding::Zstd, zstd_at(&tar, 19)),
    ] {
        let stored = store
            .store(stream_of(sent), encoding, ArtifactKind::Image)
            .await
            .unwrap();
        assert_eq!(stored.digest.as_deref(), Some(expected.as_str()));
    }
}

/// Stores `sent` and expects a refusal (400-style, or 413-style for one
/// too large) holding every one of `parts`, with nothing left in the
/// store's directory.
async fn refused(
    store: &ArtifactFiles,
    dir: &Path,
    sent: Vec<u8>,
    encoding: Encoding,
    parts: &[&str],
) {
    let err = store
        .store(stream_of(sent), encoding, ArtifactKind::Files)
        .await
        .expect_err("the upload is refused");
    let msg = match &err {
        EngineError::Invalid(m) | EngineError::TooLarge(m) => m.clone(),
        other => panic!("expected Invalid or TooLarge, got {other:?}"),
    };
    for part in parts {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
    assert_eq!(leftovers(dir), Vec::<String>::new(), "after {msg}");
}

#[tokio::test]
async fn a_refused_upload_leaves_nothing() {
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir).with_max_bytes(2 * 1024 * 1024);
    let absolute = tar_with_path(b"/etc/evil");
    let climbing = tar_with_path(b"a/../../evil");
    for encoding in [Encoding::Raw, Encoding::Zstd, Encoding::Gzip] {
        let enc = |d: &[u8]| match encoding {
            Encoding::Raw => d.to_vec(),
            Encoding::Zstd => zstd_at(d, 3),
            Encoding::Gzip => gzip(d),
        };
        let d = dir.path();
        refused(
            &store,
            d,
            enc(&absolute),
            encoding,
            &["\"/etc/evil\"", "absolute paths are not allowed"],
        )
        .await;
        refused(
            &store,
            d,
            enc(&climbing),
            encoding,
            &["a/../", "path escapes the destination"],
        )
        .await;
        let bomb = tar_with_path(b"ok")
            .into_iter()
            .chain(vec![0u8; 3 << 20])
            .collect::<Vec<_>>();
        refused(
            &store,
            d,
            enc(&bomb),
            encoding,
            &["exceeds the limit of 2097152 bytes"],
        )
        .await;
        refused(
            &store,
            d,
            enc(b"not a tar at all, just some words"),
            encoding,
            &["not a tar stream"],
        )
        .await;
    }
    refused(
        &store,
        dir.path(),
        b"garbage".to_vec(),
        Encoding::Zstd,
        &["not a zstd stream"],
    )
    .await;
    let mut truncated = zstd_at(&sample_tar(), 3);
    truncated.truncate(truncated.len() / 2);
    refused(&store, dir.path(), truncated, Encoding::Zstd, &["zstd"]).await;
}

#[tokio::test]
async fn a_failing_upload_stream_leaves_nothing() {
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir);
    let sent = zstd_at(&sample_tar(), 3);
    let half: Vec<io::Result<Bytes>> = vec![
        Ok(Bytes::copy_from_slice(&sent[..sent.len() / 2])),
        Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "client went away",
        )),
    ];
    let err = store
        .store(
            Box::pin(futures::stream::iter(half)),
            Encoding::Zstd,
            ArtifactKind::Files,
        )
        .await
        .expect_err("a broken upload fails");
    assert!(err.to_string().contains("client went away"), "{err}");
    assert_eq!(leftovers(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_dead_nodes_unfinished_uploads_are_removed_and_the_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let a = ArtifactFiles::open_for_node(dir.path().to_path_buf(), "node-a").unwrap();
    let b = ArtifactFiles::open_for_node(dir.path().to_path_buf(), "node-b").unwrap();
    // Uploads in progress of both nodes (node a was killed during its own).
    let tmp = dir.path().join("tmp");
    std::fs::write(tmp.join("node-a.upload-1.x"), b"half").unwrap();
    std::fs::write(tmp.join("node-b.upload-2.x"), b"half").unwrap();
    drop(a);
    b.forget_node("node-a").await.unwrap();
    let kept = tmp.join("node-b.upload-2.x").display().to_string();
    assert_eq!(leftovers(dir.path()), vec![kept]);
    // Forgetting a node that left nothing is no error.
    b.forget_node("node-c").await.unwrap();
}

#[tokio::test]
async fn listing_names_stored_artifacts_of_both_formats_and_nothing_else() {
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir);
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    let stored = store
        .store(stream_of(sample_tar()), Encoding::Raw, ArtifactKind::Files)
        .await
        .unwrap();
    let plain = uuid::Uuid::new_v4().to_string();
    std::fs::write(dir.path().join(format!("{plain}.tar")), sample_tar()).unwrap();
    // An upload in progress, the store's id and a stray file: not artifacts.
    std::fs::write(dir.path().join("tmp").join("n.upload-1.x"), b"half").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
    store.set_id("store-1").await.unwrap();
    let mut listed = store.list().await.unwrap();
    listed.sort();
    let mut ids: Vec<String> = listed.iter().map(|(id, _)| id.clone()).collect();
    let mut want = vec![stored.id.clone(), plain];
    want.sort();
    ids.sort();
    assert_eq!(ids, want);
    assert!(listed.iter().all(|(_, at)| *at >= before), "{listed:?}");
}

#[tokio::test]
async fn an_artifact_of_the_earlier_plain_format_still_opens() {
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir);
    let tar = sample_tar();
    let id = uuid::Uuid::new_v4().to_string();
    let old = dir.path().join(format!("{id}.tar"));
    std::fs::write(&old, &tar).unwrap();
    let plain = collect(store.open(&id, Encoding::Raw).await.unwrap())
        .await
        .unwrap();
    assert!(plain == tar, "raw");
    let z = collect(store.open(&id, Encoding::Zstd).await.unwrap())
        .await
        .unwrap();
    assert!(unzstd(&z) == tar, "zstd");
    store.delete(&id).await.unwrap();
    assert!(!old.exists(), "deleted");
    let missing = store.open(&id, Encoding::Raw).await.err().expect("gone");
    assert!(
        matches!(missing, EngineError::NotFound { .. }),
        "{missing:?}"
    );
}

/// A measurement, not a check (ignored): stores the zstd tar file named by
/// `GANTRY_STORE_BENCH` as an upload and prints how long it took. Run with
/// `/usr/bin/time -v` to read the peak RSS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn measure_storing_an_upload() {
    let Ok(path) = std::env::var("GANTRY_STORE_BENCH") else {
        panic!("set GANTRY_STORE_BENCH to a .tar.zst file");
    };
    let dir = TempDir::new().unwrap();
    let store = store_in(&dir);
    let file = tokio::fs::File::open(&path).await.unwrap();
    let body: ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(
        file,
        256 * 1024,
    ));
    let started = std::time::Instant::now();
    let stored = store
        .store(body, Encoding::Zstd, ArtifactKind::Image)
        .await
        .unwrap();
    let took = started.elapsed();
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "stored {} tar bytes ({} on disk) in {:.2} s, digest {:?}",
        stored.size,
        on_disk,
        took.as_secs_f64(),
        stored.digest
    );
}
