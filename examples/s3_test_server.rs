//! The S3-compatible server of the tests and of `gantry bench s3`
//! (`cargo build --example s3_test_server`; `cargo test` builds it). It is
//! the s3s project's file-system store (`s3s-fs`: each
//! object a file under the data dir, so a server killed and started again
//! on the same data dir still has every object it stored) behind its S3
//! protocol layer (`s3s`: SigV4 signatures checked, multipart uploads,
//! conditional writes), served over hyper on loopback — the `s3s-fs`
//! binary's own set-up, built with the tests (an example, on the package's
//! dev-dependencies, so it shares their dependencies and features) instead
//! of installed and compiled apart.
//!
//! `s3_test_server --port PORT --access-key KEY --secret-key SECRET ROOT`
//! (`--host`, default `127.0.0.1`).

use std::path::PathBuf;

use anyhow::Context as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;

/// Where and how the server serves.
#[derive(Debug, Clone, clap::Parser)]
struct S3TestServer {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port to listen on.
    #[arg(long)]
    port: u16,
    /// The one access key it accepts.
    #[arg(long)]
    access_key: String,
    /// The secret of the access key.
    #[arg(long)]
    secret_key: String,
    /// The data dir: `ROOT/BUCKET/KEY` is an object.
    root: PathBuf,
}

fn main() -> std::process::ExitCode {
    let opts = <S3TestServer as clap::Parser>::parse();
    match serve(opts) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            std::process::ExitCode::from(2)
        }
    }
}

/// Serves until the process is killed.
fn serve(opts: S3TestServer) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let store = s3s_fs::FileSystem::new(&opts.root)
            .map_err(|e| anyhow::anyhow!("the data dir {}: {e:?}", opts.root.display()))?;
        let mut service = S3ServiceBuilder::new(store);
        service.set_auth(SimpleAuth::from_single(opts.access_key, opts.secret_key));
        let service = service.build();
        let listener = tokio::net::TcpListener::bind((opts.host.as_str(), opts.port))
            .await
            .with_context(|| format!("listening on {}:{}", opts.host, opts.port))?;
        let http = ConnBuilder::new(TokioExecutor::new());
        loop {
            let socket = match listener.accept().await {
                Ok((socket, _)) => socket,
                Err(e) => {
                    eprintln!("s3-test-server: accepting a connection: {e}");
                    continue;
                }
            };
            let conn = http
                .serve_connection(TokioIo::new(socket), service.clone())
                .into_owned();
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    })
}
