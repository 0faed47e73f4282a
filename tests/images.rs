//! End to end: a task runs from an OCI image layout tar built in the test
//! from a busybox-static root filesystem (two layers, the second with a
//! whiteout); a second container from the same image reuses the unpacked
//! image instead of unpacking it again.

use crate::common;

use common::oci::{oci_image, tar_with_modes};
use common::*;

#[test]
fn a_task_runs_from_an_oci_image_unpacked_once_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    let image = dir.path().join("busybox-oci.tar");
    oci_image(&image);
    write(
        &dir.path().join("task.yml"),
        "platform: linux\nrun:\n  path: sh\n  args: [-c, 'test -e /etc/os-release && echo host-view; test -e /bin/ls && echo ls-present; cat /hello.txt; id -u']\n",
    );
    let task = dir.path().join("task.yml");
    for round in 0..2 {
        let out = client(
            &server.url,
            &[
                "execute",
                "-c",
                task.to_str().unwrap(),
                "--image",
                image.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "round {round}: {}\nlog:\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.log_text()
        );
        // The image's own root: no host files, the whiteout removed ls, layer 2 applied.
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "from the second layer\n0\n"
        );
    }
    let unpacks = server
        .log_text()
        .matches("unpacked image into volume")
        .count();
    assert_eq!(unpacks, 1, "the image was unpacked {unpacks} times");
    // A bad image is refused with a clear error.
    let bad = dir.path().join("bad.tar");
    std::fs::write(
        &bad,
        tar_with_modes(&[
            (
                "oci-layout",
                b"{\"imageLayoutVersion\":\"1.0.0\"}",
                false,
                0o644,
            ),
            (
                "index.json",
                b"{\"schemaVersion\":2,\"manifests\":[]}",
                false,
                0o644,
            ),
        ]),
    )
    .unwrap();
    let out = client(
        &server.url,
        &[
            "execute",
            "-c",
            task.to_str().unwrap(),
            "--image",
            bad.to_str().unwrap(),
        ],
    );
    let last = failure_line(&out);
    assert!(last.contains("image"), "{last}");
}
