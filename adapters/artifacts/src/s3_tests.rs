//! Tests of the object storage artifact store on `object_store`'s
//! in-memory client (the real S3 server is in `tests/artifacts_s3.rs`):
//! uploads in several parts read back whole, refused uploads leave no
//! object, the id round-trips, and plain HTTP only on loopback.

use std::sync::Arc;

use futures::TryStreamExt as _;
use gantry_actors::api::ArtifactStore;
use gantry_actors::EngineError;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;
use object_store::memory::InMemory;
use object_store::ObjectStore;

use super::{part_size, plain_http_allowed, ArtifactS3, PART};
use crate::files::tests::{collect, noise, sample_tar, stream_of, tar_with_path};

fn store() -> (ArtifactS3, Arc<InMemory>) {
    let client = Arc::new(InMemory::new());
    let store = ArtifactS3::with_client(client.clone(), "ci/gantry", "s3://test/ci/gantry".into());
    (store, client)
}

/// Every object's key in the bucket.
async fn keys(client: &InMemory) -> Vec<String> {
    let mut keys: Vec<String> = client
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    keys.sort();
    keys
}

/// A tar of one file of `len` bytes of noise.
fn big_tar(len: usize) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(len as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "big", &noise(len, 11)[..]).unwrap();
    b.into_inner().unwrap()
}

#[tokio::test]
async fn an_upload_of_several_parts_reads_back_whole_in_every_encoding() {
    let (store, client) = store();
    // Incompressible: its zstd copy spans three parts.
    let tar = big_tar(2 * PART + PART / 2);
    let stored = store
        .store(stream_of(tar.clone()), Encoding::Raw, ArtifactKind::Files)
        .await
        .unwrap();
    assert_eq!(stored.size, tar.len() as u64);
    assert_eq!(stored.digest, None);
    assert_eq!(
        keys(&client).await,
        [format!("ci/gantry/{}.tar.zst", stored.id)]
    );
    let raw = collect(store.open(&stored.id, Encoding::Raw).await.unwrap())
        .await
        .unwrap();
    assert!(raw == tar, "the plain tar read back differs");
    let zstd = collect(store.open(&stored.id, Encoding::Zstd).await.unwrap())
        .await
        .unwrap();
    assert!(zstd::decode_all(&zstd[..]).unwrap() == tar);
}

#[tokio::test]
async fn a_small_upload_is_one_part_and_an_image_has_its_digest() {
    let (store, _client) = store();
    let tar = sample_tar();
    let zstd = zstd::encode_all(&tar[..], 3).unwrap();
    let stored = store
        .store(stream_of(zstd.clone()), Encoding::Zstd, ArtifactKind::Image)
        .await
        .unwrap();
    use sha2::Digest as _;
    let want = format!("sha256:{:x}", sha2::Sha256::digest(&tar));
    assert_eq!(stored.digest, Some(want));
    // Stored as sent.
    let back = collect(store.open(&stored.id, Encoding::Zstd).await.unwrap())
        .await
        .unwrap();
    assert_eq!(back, zstd);
}

#[tokio::test]
async fn a_refused_upload_leaves_no_object() {
    let (store, client) = store();
    let escaping = store
        .store(
            stream_of(tar_with_path(b"../evil")),
            Encoding::Raw,
            ArtifactKind::Files,
        )
        .await;
    assert!(
        matches!(escaping, Err(EngineError::Invalid(_))),
        "{escaping:?}"
    );
    let small = store.with_max_bytes(PART as u64);
    let too_large = small
        .store(
            stream_of(big_tar(2 * PART)),
            Encoding::Raw,
            ArtifactKind::Files,
        )
        .await;
    assert!(
        matches!(&too_large, Err(EngineError::TooLarge(m)) if m.contains("web.max_artifact_bytes")),
        "{too_large:?}"
    );
    // Cut off after more than a part (within the limit).
    let broken: gantry_wire::runtime::ByteStream = Box::pin(futures::stream::iter(vec![
        Ok(bytes::Bytes::from(
            big_tar(PART)[..PART / 2 + 4096].to_vec(),
        )),
        Err(std::io::Error::other("the client went away")),
    ]));
    let cut = small
        .store(broken, Encoding::Raw, ArtifactKind::Files)
        .await;
    assert!(
        matches!(&cut, Err(e) if e.to_string().contains("the client went away")),
        "{cut:?}"
    );
    assert_eq!(keys(&client).await, Vec::<String>::new());
}

#[tokio::test]
async fn the_id_round_trips_and_a_missing_artifact_is_not_found() {
    let (store, client) = store();
    assert_eq!(store.id().await.unwrap(), None);
    store.check().await.unwrap();
    store.set_id("a1b2").await.unwrap();
    assert_eq!(store.id().await.unwrap().as_deref(), Some("a1b2"));
    assert_eq!(keys(&client).await, ["ci/gantry/.store-id"]);
    for id in ["0123-4567", "../x"] {
        let missing = store.open(id, Encoding::Raw).await.err();
        assert!(
            matches!(
                missing,
                Some(EngineError::NotFound {
                    kind: "artifact",
                    ..
                })
            ),
            "{missing:?}"
        );
    }
    // Deleting a missing artifact is no error; deleting one removes it.
    store.delete("0123-4567").await.unwrap();
    let stored = store
        .store(stream_of(sample_tar()), Encoding::Raw, ArtifactKind::Files)
        .await
        .unwrap();
    store.delete(&stored.id).await.unwrap();
    assert_eq!(keys(&client).await, ["ci/gantry/.store-id"]);
}

#[test]
fn plain_http_is_for_loopback_unless_allowed() {
    assert!(!plain_http_allowed("https://s3.example.net", false).unwrap());
    for local in [
        "http://127.0.0.1:9000",
        "http://localhost:9000",
        "http://[::1]:9000",
    ] {
        assert!(plain_http_allowed(local, false).unwrap(), "{local}");
    }
    let e = plain_http_allowed("http://10.1.2.3:9000", false).unwrap_err();
    assert!(
        e.to_string().contains("set web.s3.allow_http = true"),
        "{e}"
    );
    assert!(plain_http_allowed("http://10.1.2.3:9000", true).unwrap());
    let e = plain_http_allowed("ftp://x", false).unwrap_err();
    assert!(e.to_string().contains("unknown scheme \"ftp\""), "{e}");
}

#[test]
fn parts_grow_only_when_the_largest_artifact_needs_more_than_9000() {
    assert_eq!(part_size(10 << 30), PART);
    assert_eq!(part_size(0), PART);
    let huge = 1u64 << 40;
    assert!(part_size(huge) as u64 * 9_000 >= huge);
    assert!((part_size(huge) as u64) < huge / 8_000);
}
