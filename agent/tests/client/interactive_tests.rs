//! Interactive processes through the runtime interface: stdin streamed to a
//! process, end-of-file for one given none, and TTYs (window size, resizes),
//! on the local backend and with runc (as the init and joining it).

use std::time::Duration;

use bytes::Bytes;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{
    ByteStream, Container, OutputStream, ProcessIo, ProcessOutput, ProcessSignal, Worker,
};
use gantry_wire::spec::{RootfsSpec, WindowSize};
use tokio::sync::mpsc;

use super::test_support::{
    can_run_isolated, config, container_spec, process, run, uuid, worker, RuncCleanup, RUNC,
};
use gantry_agent::start_worker;

/// Stdin fed to a process through a channel, as the web node's hijack does.
fn stdin_channel() -> (mpsc::Sender<std::io::Result<Bytes>>, ByteStream) {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    (tx, gantry_wire::runtime::channel_stream(rx))
}

/// Reads output until it contains `needle` (carriage returns dropped).
async fn read_until(rx: &mut mpsc::Receiver<ProcessOutput>, seen: &mut String, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.contains(needle) {
        let chunk = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} in the output; so far: {seen:?}"));
        let Some(chunk) = chunk else {
            panic!("output ended without {needle:?}; got {seen:?}")
        };
        assert_eq!(chunk.stream, OutputStream::Stdout, "a TTY has one stream");
        seen.push_str(&String::from_utf8_lossy(&chunk.data).replace('\r', ""));
    }
}

/// Runs an interactive shell script on a TTY: it reports its window
/// size, waits for a line, reports the size again (after the test
/// resized it) and exits 3. Under runc the new size reaches the inner
/// terminal when runc handles its SIGWINCH, which may come after the line:
/// the script waits (at most 5 s) for the size to change before it tells.
/// `resizes`: whether a resize reaches the process (not under crun 1.8,
/// which does not pass its terminal's new size on in the foreground).
/// Under crun the first size also arrives a moment late: `crun exec` sizes
/// the container's terminal in its parent after the child has exec'd, so a
/// process may see 0x0 at its very start. There the script waits (at most
/// 5 s) for the first size too; under runc it reads it at once.
async fn tty_round_trip(container: &dyn Container, id: &str, resizes: bool) {
    let first_size = if resizes {
        "s=$(stty size)"
    } else {
        "i=0; while [ $i -lt 50 ]; do s=$(stty size); [ \"$s\" != '0 0' ] && break; sleep 0.1; i=$((i+1)); done"
    };
    let mut spec = process(
        id,
        &format!(
            "[ -t 0 ] && echo on-a-tty; {first_size}; echo \"size $s\"; read line; \
             i=0; while [ $i -lt 50 ]; do s=$(stty size); [ \"$s\" != '24 80' ] && break; sleep 0.1; i=$((i+1)); done; \
             echo \"size $s\"; echo \"got $line $TERM\"; exit 3"
        ),
        None,
    );
    spec.tty = Some(WindowSize {
        columns: 80,
        rows: 24,
    });
    let (stdin_tx, stdin) = stdin_channel();
    let (tx, mut rx) = mpsc::channel(64);
    let process = container
        .run(
            spec,
            ProcessIo {
                stdin: Some(stdin),
                output: tx,
            },
        )
        .await
        .unwrap();
    let mut seen = String::new();
    read_until(&mut rx, &mut seen, "size 24 80\n").await;
    assert!(seen.contains("on-a-tty\n"), "{seen:?}");
    process
        .set_tty(WindowSize {
            columns: 132,
            rows: 43,
        })
        .await
        .unwrap();
    stdin_tx
        .send(Ok(Bytes::from_static(b"hello\n")))
        .await
        .unwrap();
    read_until(&mut rx, &mut seen, "got hello xterm\n").await;
    if resizes {
        assert!(seen.contains("size 43 132\n"), "{seen:?}");
    }
    assert_eq!(process.wait().await.unwrap(), 3, "output: {seen:?}");
    // After the end, resizing is harmless and input goes nowhere.
    process
        .set_tty(WindowSize {
            columns: 10,
            rows: 10,
        })
        .await
        .unwrap();
}

/// A process given stdin reads it to its end; one given none reads
/// end-of-file at once; a process without a TTY cannot be resized.
async fn stdin_round_trip(container: &dyn Container, id: &str) {
    let (stdin_tx, stdin) = stdin_channel();
    let (tx, mut rx) = mpsc::channel(64);
    let cat = container
        .run(
            process(id, "cat; echo done", None),
            ProcessIo {
                stdin: Some(stdin),
                output: tx,
            },
        )
        .await
        .unwrap();
    stdin_tx
        .send(Ok(Bytes::from_static(b"first\n")))
        .await
        .unwrap();
    let mut seen = String::new();
    read_until(&mut rx, &mut seen, "first\n").await;
    stdin_tx
        .send(Ok(Bytes::from_static(b"second\n")))
        .await
        .unwrap();
    drop(stdin_tx);
    read_until(&mut rx, &mut seen, "done\n").await;
    assert_eq!(seen, "first\nsecond\ndone\n");
    assert_eq!(cat.wait().await.unwrap(), 0);
    match cat
        .set_tty(WindowSize {
            columns: 1,
            rows: 1,
        })
        .await
    {
        Ok(()) => {} // it has ended: nothing to resize
        Err(e) => panic!("resizing an ended process: {e}"),
    }

    let no_stdin = format!("{id}-closed");
    let (out, status) = run(
        container,
        Some(process(&no_stdin, "cat; echo eof", None)),
        &no_stdin,
    )
    .await;
    assert_eq!(
        (out, status.unwrap()),
        (vec![(OutputStream::Stdout, "eof\n".to_string())], 0)
    );

    // Given its whole input with its start, a process reads it to its end
    // with no caller feeding it (its caller may be gone).
    let given = format!("{id}-given");
    let mut spec = process(&given, "cat; echo end", None);
    spec.input = Some("the request\n".into());
    let (out, status) = run(container, Some(spec), &given).await;
    assert_eq!(
        (out, status.unwrap()),
        (
            vec![(OutputStream::Stdout, "the request\nend\n".to_string())],
            0
        )
    );

    let (tx, _rx) = mpsc::channel(4);
    let sleeper = container
        .run(
            process(&format!("{id}-sleeper"), "exec sleep 60", None),
            ProcessIo {
                stdin: None,
                output: tx,
            },
        )
        .await
        .unwrap();
    match sleeper
        .set_tty(WindowSize {
            columns: 80,
            rows: 24,
        })
        .await
    {
        Err(RuntimeError::Worker {
            status: 400,
            message,
            ..
        }) => assert!(message.contains("no TTY"), "{message}"),
        other => panic!("resizing a process without a TTY: {other:?}"),
    }
    sleeper.signal(ProcessSignal::Kill).await.unwrap();
    assert_eq!(sleeper.wait().await.unwrap(), 137);
}

#[actix_rt::test]
async fn local_agent_feeds_stdin_and_resizes_tty_processes() {
    let work = tempfile::tempdir().unwrap();
    let agent = start_worker(config(work.path(), "local")).await.unwrap();
    let worker = worker(&agent);
    let ch = uuid();
    let container = worker
        .find_or_create_container(&container_spec(&ch, RootfsSpec::Default, vec![]))
        .await
        .unwrap();
    stdin_round_trip(&*container, "in").await;
    tty_round_trip(&*container, "tty", true).await;
    worker.destroy_container(&ch).await.unwrap();
    agent.stop().await;
}

#[actix_rt::test]
async fn runc_agent_runs_tty_processes_as_init_and_with_exec_and_resizes_them() {
    if !can_run_isolated(&[RUNC]) {
        return;
    }
    tty_processes_as_init_and_with_exec("runc").await;
}

#[actix_rt::test]
async fn crun_agent_runs_tty_processes_as_init_and_with_exec_and_resizes_them() {
    if !can_run_isolated(&[RUNC, "/usr/bin/crun"]) {
        return;
    }
    tty_processes_as_init_and_with_exec("crun").await;
}

/// TTY and stdin processes of an OCI runtime backend, as init and joining
/// one (a hijack).
async fn tty_processes_as_init_and_with_exec(backend: &str) {
    let work = tempfile::tempdir().unwrap();
    let agent = start_worker(config(work.path(), backend)).await.unwrap();
    let worker = worker(&agent);
    let ch = uuid();
    let _cleanup = RuncCleanup {
        work_dir: work.path().canonicalize().unwrap(),
        handles: vec![ch.clone()],
    };
    let container = worker
        .find_or_create_container(&container_spec(&ch, RootfsSpec::Default, vec![]))
        .await
        .unwrap();
    // As the container's init (runc run)...
    tty_round_trip(&*container, "tty-init", backend != "crun").await;
    // ...and joining a running init (runc exec), as a hijack does.
    let (tx, _rx) = mpsc::channel(4);
    let init = container
        .run(
            process("init", "exec sleep 60", None),
            ProcessIo {
                stdin: None,
                output: tx,
            },
        )
        .await
        .unwrap();
    tty_round_trip(&*container, "tty-exec", backend != "crun").await;
    stdin_round_trip(&*container, "in").await;
    init.signal(ProcessSignal::Kill).await.unwrap();
    assert_eq!(init.wait().await.unwrap(), 137);
    worker.destroy_container(&ch).await.unwrap();
    agent.stop().await;
}
