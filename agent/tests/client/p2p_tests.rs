//! Two agents in one process streaming a volume peer to peer: a signed URL
//! of A's volume pulled by B (`stream-from`), refused URLs and a source that
//! breaks off failing with 502s that say why, and the stream counters in
//! `/health`.

use std::io::Write;
use std::time::Duration;

use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::Worker;
use gantry_wire::spec::{Encoding, VolumeSpec, VolumeStrategy};
use gantry_wire::stream_url::StreamGrant;

use super::test_support::{test_config, uuid, worker};
use gantry_agent::{start_worker, WorkerHandle};
use gantry_wire::agent_api::{Health, StreamCounts};

/// An empty volume's spec.
fn volume_spec(handle: &str) -> VolumeSpec {
    VolumeSpec {
        handle: handle.into(),
        strategy: VolumeStrategy::Empty,
        privileged: false,
        properties: Default::default(),
    }
}

/// Unix ms `secs` from now.
fn in_secs(secs: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now + secs * 1000
}

/// The stream counters of an agent's `/health`.
async fn streams(agent: &WorkerHandle) -> StreamCounts {
    let health: Health = reqwest::get(format!("{}/health", agent.agent_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    health.streams
}

/// Waits (with a deadline) until `agent` has no stream going either way.
async fn wait_idle(agent: &WorkerHandle) -> StreamCounts {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counts = streams(agent).await;
        if counts.out_now == 0 && counts.in_now == 0 {
            return counts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "streams still counted: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The error message of a failed pull, which must be a 502 of the agent.
fn bad_gateway(r: Result<u64, RuntimeError>) -> String {
    match r {
        Err(RuntimeError::Worker {
            status: 502,
            message,
            ..
        }) => message,
        other => panic!("expected a 502 from the agent, got {other:?}"),
    }
}

/// A one-shot HTTP server announcing a 1 MiB body and closing after `sent`
/// bytes of it; returns its address.
fn source_that_breaks_off(sent: Vec<u8>) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            let mut request = [0u8; 4096];
            let _ = std::io::Read::read(&mut conn, &mut request);
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\
                        content-length: 1048576\r\n\r\n";
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(&sent);
            let _ = conn.flush();
        }
    });
    addr
}

#[actix_rt::test]
async fn a_signed_url_streams_a_volume_between_two_agents_and_bad_ones_fail_with_reasons() {
    let (work_a, work_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start_worker(test_config("p2p-a", work_a.path(), "local"))
        .await
        .unwrap();
    let b = start_worker(test_config("p2p-b", work_b.path(), "local"))
        .await
        .unwrap();
    let key_a = a.registration().stream_key.clone();
    assert_eq!(key_a.len(), 64);
    assert_ne!(key_a, b.registration().stream_key);
    assert_ne!(key_a, a.agent_token());

    // A's volume holds `out/data.bin` (incompressible, 3 MiB) and `out/note`.
    let (wa, wb) = (worker(&a), worker(&b));
    let source = wa.create_volume(&volume_spec(&uuid())).await.unwrap();
    let data_a = a.state().volumes.get(source.handle()).unwrap().data_dir();
    std::fs::create_dir_all(data_a.join("out")).unwrap();
    let mut noise = vec![0u8; 3 << 20];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for chunk in noise.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(data_a.join("out/data.bin"), &noise).unwrap();
    std::fs::write(data_a.join("out/note"), "from A").unwrap();

    let grant = StreamGrant {
        worker: "p2p-a".into(),
        volume: source.handle().to_string(),
        path: "out".into(),
        encoding: Encoding::Zstd,
        expires_ms: in_secs(60),
    };
    let dest = wb.create_volume(&volume_spec(&uuid())).await.unwrap();
    let data_b = b.state().volumes.get(dest.handle()).unwrap().data_dir();
    let bytes = dest
        .stream_in_from(&grant.url(a.agent_url(), &key_a), "in", Encoding::Zstd)
        .await
        .unwrap();
    assert!(bytes > 3 << 20, "{bytes} bytes on the wire");
    assert_eq!(std::fs::read(data_b.join("in/data.bin")).unwrap(), noise);
    assert_eq!(std::fs::read(data_b.join("in/note")).unwrap(), b"from A");
    let (counts_a, counts_b) = (wait_idle(&a).await, wait_idle(&b).await);
    assert_eq!((counts_a.out_max, counts_a.in_max), (1, 0), "{counts_a:?}");
    assert_eq!((counts_b.out_max, counts_b.in_max), (0, 1), "{counts_b:?}");

    // Refused URLs: B answers 502 with the source's reason, writes nothing.
    let empty = wb.create_volume(&volume_spec(&uuid())).await.unwrap();
    let empty_dir = b.state().volumes.get(empty.handle()).unwrap().data_dir();
    let refused = [
        (
            grant.url(a.agent_url(), "not A's key"),
            "signature does not match",
        ),
        (
            StreamGrant {
                expires_ms: in_secs(-1),
                ..grant.clone()
            }
            .url(a.agent_url(), &key_a),
            "expired",
        ),
        (
            StreamGrant {
                worker: "p2p-b".into(),
                ..grant.clone()
            }
            .url(a.agent_url(), &key_a),
            "for worker \"p2p-b\"",
        ),
        (
            grant
                .url(a.agent_url(), &key_a)
                .replace("path=out", "path=out%2F"),
            "signature does not match",
        ),
    ];
    for (url, why) in refused {
        let message = bad_gateway(empty.stream_in_from(&url, "", Encoding::Zstd).await);
        assert!(
            message.starts_with("source worker answered 403 Forbidden: stream URL refused")
                && message.contains(why),
            "{url}: {message}"
        );
        assert_eq!(std::fs::read_dir(&empty_dir).unwrap().count(), 0, "{url}");
    }

    // Nobody listening at the source, and a source that breaks off.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = closed.local_addr().unwrap();
    drop(closed);
    // Nothing was written, so it is told apart: the web node may relay.
    let message = match empty
        .stream_in_from(&format!("http://{gone}/p2p/x"), "", Encoding::Raw)
        .await
    {
        Err(RuntimeError::PeerUnreachable { reason, .. }) => reason,
        other => panic!("expected the source to be unreachable, got {other:?}"),
    };
    assert!(
        message.starts_with(&format!("pulling from {gone}: ")),
        "{message}"
    );
    // A raw tar stream of a file of 100000 bytes, cut after 188 of them.
    let mut header = tar::Header::new_gnu();
    header.set_path("big").unwrap();
    header.set_size(100_000);
    header.set_mode(0o644);
    header.set_cksum();
    let mut partial = header.as_bytes().to_vec();
    partial.extend_from_slice(&[7u8; 188]);
    let cut = source_that_breaks_off(partial);
    let message = bad_gateway(
        empty
            .stream_in_from(&format!("http://{cut}/p2p/x"), "", Encoding::Raw)
            .await,
    );
    assert!(
        message.starts_with(&format!("pulling from {cut}: ")),
        "{message}"
    );

    // Bad requests and a missing volume.
    let err = empty
        .stream_in_from("ftp://somewhere/x", "", Encoding::Zstd)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::Worker { status: 400, .. }),
        "{err}"
    );
    wb.destroy_volume(empty.handle()).await.unwrap();
    let err = empty
        .stream_in_from(&grant.url(a.agent_url(), &key_a), "", Encoding::Zstd)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::NotFound { kind: "volume", .. }),
        "{err}"
    );
    let counts_b = wait_idle(&b).await;
    assert_eq!(counts_b.in_now, 0);
    a.stop().await;
    b.stop().await;
}
