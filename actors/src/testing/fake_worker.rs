//! An in-memory worker for tests of builds: volumes and containers are
//! names in sets, and each process is a task that prints a line, then exits
//! on its own, on SIGKILL, or on SIGTERM as told. Every signal is recorded
//! with the (possibly paused) clock's time it arrived.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::error::RuntimeError;
use crate::runtime::{
    ByteStream, Container, OutputStream, Process, ProcessIo, ProcessOutput, ProcessSignal, Volume,
    Worker, WorkerConnector, WorkerHandles,
};
use crate::spec::{ContainerSpec, Encoding, ProcessSpec, VolumeSpec, WindowSize};
use crate::worker_info::WorkerRegistration;

/// How the processes of a [`FakeWorker`] behave.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Behaviour {
    /// Exit on their own this long after starting, with the status given as
    /// the process's first argument (0 when there is none); `None`: run
    /// until signalled.
    pub exit_after: Option<Duration>,
    /// Exit (143) this long after SIGTERM; `None`: ignore SIGTERM.
    pub on_term: Option<Duration>,
}

/// What the worker holds and what its processes were sent.
#[derive(Default)]
struct Record {
    volumes: HashSet<String>,
    containers: HashSet<String>,
    /// Processes started so far.
    started: usize,
    /// Signals sent to any process, with when they arrived.
    signals: Vec<(ProcessSignal, Instant)>,
}

/// A worker living in memory.
pub(crate) struct FakeWorker {
    name: String,
    behaviour: Behaviour,
    record: Arc<Mutex<Record>>,
}

impl FakeWorker {
    /// A worker named `name` whose processes behave as `behaviour` says.
    pub(crate) fn new(name: &str, behaviour: Behaviour) -> Arc<Self> {
        Arc::new(FakeWorker {
            name: name.into(),
            behaviour,
            record: Arc::default(),
        })
    }

    /// Processes started so far.
    pub(crate) fn started(&self) -> usize {
        self.lock().started
    }

    /// Signals sent so far, with when they arrived.
    pub(crate) fn signals(&self) -> Vec<(ProcessSignal, Instant)> {
        self.lock().signals.clone()
    }

    /// Containers and volumes it holds now.
    pub(crate) fn held(&self) -> usize {
        let r = self.lock();
        r.containers.len() + r.volumes.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Connects every registration to the same worker.
pub(crate) struct FakeConnector(pub Arc<FakeWorker>);

impl WorkerConnector for FakeConnector {
    fn connect(&self, _: &WorkerRegistration) -> Arc<dyn Worker> {
        self.0.clone()
    }
}

struct FakeVolume(String);

#[async_trait]
impl Volume for FakeVolume {
    fn handle(&self) -> &str {
        &self.0
    }
    async fn stream_in(&self, _: &str, _: Encoding, _: ByteStream) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn stream_out(&self, _: &str, _: Encoding) -> Result<ByteStream, RuntimeError> {
        Ok(Box::pin(futures::stream::empty()))
    }
    async fn stream_file_out(&self, _: &str) -> Result<ByteStream, RuntimeError> {
        Ok(Box::pin(futures::stream::empty()))
    }
}

struct FakeContainer {
    handle: String,
    behaviour: Behaviour,
    record: Arc<Mutex<Record>>,
}

#[async_trait]
impl Container for FakeContainer {
    fn handle(&self) -> &str {
        &self.handle
    }

    async fn run(
        &self,
        spec: ProcessSpec,
        io: ProcessIo,
    ) -> Result<Box<dyn Process>, RuntimeError> {
        let status = spec.args.first().and_then(|a| a.parse().ok()).unwrap_or(0);
        let (signals, mut inbox) = mpsc::unbounded_channel();
        let (exited, exit) = watch::channel(None);
        let behaviour = self.behaviour;
        self.record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .started += 1;
        tokio::spawn(async move {
            let output = io.output;
            let ready = ProcessOutput {
                stream: OutputStream::Stdout,
                data: Bytes::from_static(b"ready\n"),
            };
            let _ = output.send(ready).await;
            // A zero delay exits at once: timers wait for the clock to move,
            // and a paused clock moves only when a test says so.
            let end = behaviour.exit_after.map(|d| Instant::now() + d);
            let mut term_exit: Option<Instant> = None;
            let code = loop {
                if end == Some(Instant::now()) {
                    break status;
                }
                if term_exit == Some(Instant::now()) {
                    break 143;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(end.unwrap_or_else(Instant::now)), if end.is_some() => break status,
                    _ = tokio::time::sleep_until(term_exit.unwrap_or_else(Instant::now)), if term_exit.is_some() => break 143,
                    signal = inbox.recv() => match signal {
                        Some(ProcessSignal::Kill) | None => break 137,
                        Some(ProcessSignal::Terminate) => {
                            if let Some(d) = behaviour.on_term {
                                term_exit.get_or_insert(Instant::now() + d);
                            }
                        }
                        Some(ProcessSignal::Interrupt) => {}
                    }
                }
            };
            // The output ends (the sender is dropped) as the process exits.
            drop(output);
            let _ = exited.send(Some(code));
        });
        Ok(Box::new(FakeProcess {
            id: spec.id,
            signals,
            exit,
            record: self.record.clone(),
        }))
    }

    async fn attach(&self, id: &str, _: ProcessIo) -> Result<Box<dyn Process>, RuntimeError> {
        Err(RuntimeError::NotFound {
            worker: "fake".into(),
            kind: "process",
            handle: id.into(),
        })
    }
}

struct FakeProcess {
    id: String,
    signals: mpsc::UnboundedSender<ProcessSignal>,
    exit: watch::Receiver<Option<i32>>,
    record: Arc<Mutex<Record>>,
}

#[async_trait]
impl Process for FakeProcess {
    fn id(&self) -> &str {
        &self.id
    }
    async fn wait(&self) -> Result<i32, RuntimeError> {
        let mut exit = self.exit.clone();
        let code = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| RuntimeError::Stream("the fake process vanished".into()))?;
        Ok(code.unwrap_or_default())
    }
    async fn signal(&self, signal: ProcessSignal) -> Result<(), RuntimeError> {
        self.record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .signals
            .push((signal, Instant::now()));
        let _ = self.signals.send(signal);
        Ok(())
    }
    async fn set_tty(&self, _: WindowSize) -> Result<(), RuntimeError> {
        Ok(())
    }
}

#[async_trait]
impl Worker for FakeWorker {
    fn name(&self) -> &str {
        &self.name
    }
    async fn create_volume(&self, spec: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError> {
        self.lock().volumes.insert(spec.handle.clone());
        Ok(Arc::new(FakeVolume(spec.handle.clone())))
    }
    async fn lookup_volume(&self, handle: &str) -> Result<Option<Arc<dyn Volume>>, RuntimeError> {
        let held = self.lock().volumes.contains(handle);
        Ok(held.then(|| Arc::new(FakeVolume(handle.into())) as Arc<dyn Volume>))
    }
    async fn destroy_volume(&self, handle: &str) -> Result<(), RuntimeError> {
        self.lock().volumes.remove(handle);
        Ok(())
    }
    async fn find_or_create_container(
        &self,
        spec: &ContainerSpec,
    ) -> Result<Arc<dyn Container>, RuntimeError> {
        self.lock().containers.insert(spec.handle.clone());
        Ok(Arc::new(FakeContainer {
            handle: spec.handle.clone(),
            behaviour: self.behaviour,
            record: self.record.clone(),
        }))
    }
    async fn lookup_container(&self, _: &str) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
        Ok(None)
    }
    async fn destroy_container(&self, handle: &str) -> Result<(), RuntimeError> {
        self.lock().containers.remove(handle);
        Ok(())
    }
    async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError> {
        let r = self.lock();
        Ok(WorkerHandles {
            containers: r.containers.iter().cloned().collect(),
            volumes: r.volumes.iter().cloned().collect(),
        })
    }
}
