//! The S3-compatible server of the tests and of `gantry bench s3`:
//! `gantry s3-test-server`, only in binaries built with the `bench`
//! feature. It is the s3s project's file-system store (`s3s-fs`: each
//! object a file under the data dir, so a server killed and started again
//! on the same data dir still has every object it stored) behind its S3
//! protocol layer (`s3s`: SigV4 signatures checked, multipart uploads,
//! conditional writes), served over hyper on loopback — the `s3s-fs`
//! binary's own set-up, built with the rest of the workspace (sharing its
//! dependencies) instead of installed and compiled apart.

use std::path::PathBuf;

use anyhow::Context as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;

/// Where and how the server serves.
#[derive(Debug, Clone)]
pub struct S3TestServer {
    /// The address to listen on.
    pub host: String,
    /// The port to listen on.
    pub port: u16,
    /// The one access key it accepts.
    pub access_key: String,
    /// The secret of the access key.
    pub secret_key: String,
    /// The data dir: `root/BUCKET/KEY` is an object.
    pub root: PathBuf,
}

/// Serves until the process is killed.
pub fn serve(opts: S3TestServer) -> anyhow::Result<()> {
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
