//! The runtime interface: the only way the engine talks to workers.
//!
//! Scheduling is not part of it: the Scheduler picks a worker, then a step
//! talks to that worker through these traits. The agent client in the
//! `gantry` package implements them over the worker agent's HTTP API; another
//! backend (Kubernetes, Nomad) would be one more implementation.

use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::RuntimeError;
use crate::spec::{ContainerSpec, Encoding, ProcessSpec, VolumeSpec, WindowSize};

/// A stream of bytes (tar streams, file contents, stdin).
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// A `Send` stream of a channel's items, ending when every sender is gone
/// (process input fed from another task, a request body handed across
/// threads).
pub fn channel_stream(rx: mpsc::Receiver<std::io::Result<Bytes>>) -> ByteStream {
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

/// Which output stream a chunk of process output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputStream {
    /// The name used in events and on the wire.
    pub fn as_str(&self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// A chunk of output, in the order the process wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutput {
    /// Where the chunk was written.
    pub stream: OutputStream,
    /// The bytes, unmodified.
    pub data: Bytes,
}

/// Where a process's input comes from and where its output goes.
pub struct ProcessIo {
    /// Standard input, if any; the process sees end-of-file when it ends.
    pub stdin: Option<ByteStream>,
    /// Receives stdout and stderr chunks in the order they were written. A
    /// closed receiver does not stop the process.
    pub output: mpsc::Sender<ProcessOutput>,
}

/// A signal to deliver to a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessSignal {
    /// SIGTERM: ask the process to stop.
    Terminate,
    /// SIGKILL: stop it now.
    Kill,
    /// SIGINT: as from Ctrl-C.
    Interrupt,
}

/// A process running (or finished) in a container.
#[async_trait]
pub trait Process: Send + Sync {
    /// The id given in its [`ProcessSpec`].
    fn id(&self) -> &str;
    /// Waits for the process to exit and returns its exit status.
    async fn wait(&self) -> Result<i32, RuntimeError>;
    /// Delivers a signal.
    async fn signal(&self, signal: ProcessSignal) -> Result<(), RuntimeError>;
    /// Changes the size of its TTY.
    async fn set_tty(&self, size: WindowSize) -> Result<(), RuntimeError>;
}

/// A container on a worker.
#[async_trait]
pub trait Container: Send + Sync {
    /// The handle the web node gave it.
    fn handle(&self) -> &str;
    /// Starts a process; its output flows into `io.output` until it exits.
    async fn run(&self, spec: ProcessSpec, io: ProcessIo)
        -> Result<Box<dyn Process>, RuntimeError>;
    /// Reattaches to a process started earlier (output is replayed from its start).
    async fn attach(&self, id: &str, io: ProcessIo) -> Result<Box<dyn Process>, RuntimeError>;
}

/// A volume on a worker.
#[async_trait]
pub trait Volume: Send + Sync {
    /// The handle the web node gave it.
    fn handle(&self) -> &str;
    /// Extracts a tar stream (in `encoding`) at `path` (relative to the volume root).
    async fn stream_in(
        &self,
        path: &str,
        encoding: Encoding,
        body: ByteStream,
    ) -> Result<(), RuntimeError>;
    /// Streams `path` (relative to the volume root) out as a tar stream in `encoding`.
    async fn stream_out(&self, path: &str, encoding: Encoding) -> Result<ByteStream, RuntimeError>;
    /// Streams the contents of one file.
    async fn stream_file_out(&self, path: &str) -> Result<ByteStream, RuntimeError>;
    /// Unpacks an image into the volume as a root filesystem: a rootfs tar,
    /// or an OCI image layout tar (`docker save`/`skopeo ... oci-archive:`),
    /// whose layers are applied in order with their whiteouts. The volume is
    /// then used read-only, as the lower layer of containers' root filesystems
    /// (`RootfsSpec::Volume`).
    async fn import_image(&self, encoding: Encoding, body: ByteStream) -> Result<(), RuntimeError> {
        let _ = (encoding, body);
        Err(RuntimeError::Stream(format!(
            "volume {}: this worker cannot import images",
            self.handle()
        )))
    }

    /// Makes the (empty) volume the root filesystem of a registry image
    /// ([`crate::native::PullImage`]): layers from the worker's cache, else
    /// from the registry; used like an imported image.
    async fn pull_image(
        &self,
        pull: &crate::native::PullImage,
    ) -> Result<crate::native::PulledImage, RuntimeError> {
        let _ = pull;
        Err(RuntimeError::Stream(format!(
            "volume {}: this worker cannot pull images",
            self.handle()
        )))
    }

    /// Pulls a tar stream in `encoding` from `url` (a signed stream URL of
    /// another worker's volume, see [`crate::stream_url`]) and extracts it at
    /// `path`; returns the bytes received.
    async fn stream_in_from(
        &self,
        url: &str,
        path: &str,
        encoding: Encoding,
    ) -> Result<u64, RuntimeError> {
        let _ = (url, path, encoding);
        Err(RuntimeError::Stream(format!(
            "volume {}: this runtime cannot pull peer-to-peer",
            self.handle()
        )))
    }
}

/// What a worker holds, as listed by the worker itself (for GC and reconciling).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerHandles {
    /// Handles of the containers on the worker.
    pub containers: Vec<String>,
    /// Handles of the volumes on the worker.
    pub volumes: Vec<String>,
}

/// A worker, as seen by the engine.
#[async_trait]
pub trait Worker: Send + Sync {
    /// The worker's unique name.
    fn name(&self) -> &str;
    /// Creates a volume.
    async fn create_volume(&self, spec: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError>;
    /// Finds a volume by handle.
    async fn lookup_volume(&self, handle: &str) -> Result<Option<Arc<dyn Volume>>, RuntimeError>;
    /// Destroys a volume; destroying one that is gone is not an error.
    async fn destroy_volume(&self, handle: &str) -> Result<(), RuntimeError>;
    /// Returns the container with `spec.handle`, creating it when it does not exist.
    async fn find_or_create_container(
        &self,
        spec: &ContainerSpec,
    ) -> Result<Arc<dyn Container>, RuntimeError>;
    /// Finds a container by handle.
    async fn lookup_container(
        &self,
        handle: &str,
    ) -> Result<Option<Arc<dyn Container>>, RuntimeError>;
    /// Destroys a container and its processes; destroying one that is gone is not an error.
    async fn destroy_container(&self, handle: &str) -> Result<(), RuntimeError>;
    /// Lists every container and volume the worker holds.
    async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError>;
    /// Whether the worker pulls the images of `resource_type` itself
    /// ([`crate::spec::RootfsSpec::Image`]) instead of having them fetched
    /// into a volume: a task whose `image_resource` has that type runs on
    /// the image's reference, and the worker qualifies for it without
    /// shipping the type.
    fn pulls_images(&self, resource_type: &str) -> bool {
        let _ = resource_type;
        false
    }
    /// Runs a script of a type the worker runs natively
    /// ([`crate::native::NATIVE_TYPES`]) and answers what it printed.
    async fn run_native(
        &self,
        resource_type: &str,
        run: &crate::native::NativeRun,
    ) -> Result<crate::native::NativeAnswer, RuntimeError> {
        let _ = run;
        Err(RuntimeError::Stream(format!(
            "worker {}: this runtime does not run {resource_type:?} natively",
            self.name()
        )))
    }
    /// Checks that the worker answers (used by its connection's supervisor).
    async fn ping(&self) -> Result<(), RuntimeError> {
        self.list_handles().await.map(|_| ())
    }
}

/// Connects the engine to a registered worker (implemented at the edges).
pub trait WorkerConnector: Send + Sync {
    /// Builds a client for a worker from its registration.
    fn connect(&self, registration: &crate::worker_info::WorkerRegistration) -> Arc<dyn Worker>;

    /// Whether this web node can reach the worker at all: a worker
    /// registered through another node (several web nodes) that this one
    /// cannot drive, such as a Kubernetes cluster another node runs, is not
    /// placed on from here.
    fn serves(&self, _registration: &crate::worker_info::WorkerRegistration) -> bool {
        true
    }
}
