//! An in-memory worker for tests of builds: volumes and containers are
//! names in sets, and each process is a task that prints a line, then exits
//! on its own, on SIGKILL, or on SIGTERM as told. Every signal is recorded
//! with the (possibly paused) clock's time it arrived, and every run of a
//! process with its step, when it started and ended and how.
//!
//! A process's arguments say how it runs: the first is its exit status, or
//! a comma-separated list of them for the successive runs of the same step
//! (`1,1,0`: fails twice, then succeeds); the second, if any, how many
//! milliseconds it runs before it exits (`-`: until signalled), instead of
//! the worker's [`Behaviour::exit_after`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{
    ByteStream, Container, OutputStream, Process, ProcessIo, ProcessOutput, ProcessSignal, Volume,
    Worker, WorkerConnector, WorkerHandles,
};
use gantry_wire::spec::{ContainerSpec, Encoding, ProcessSpec, VolumeSpec, WindowSize};
use gantry_wire::worker_info::WorkerRegistration;

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

/// One run of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    /// The step whose container it ran in.
    pub step: String,
    /// When it started.
    pub started: Instant,
    /// When it exited, and with what status.
    pub ended: Option<(Instant, i32)>,
    /// Signals it was sent.
    pub signals: Vec<ProcessSignal>,
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
    /// Every run of a process, in the order they started.
    runs: Vec<Run>,
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

    /// Every run of a process so far, in the order they started.
    pub(crate) fn runs(&self) -> Vec<Run> {
        self.lock().runs.clone()
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

/// Connects each registration to the fake worker of its name (the first
/// one when none has it).
pub(crate) struct FakeConnector(pub Vec<Arc<FakeWorker>>);

impl WorkerConnector for FakeConnector {
    fn connect(&self, registration: &WorkerRegistration) -> Arc<dyn Worker> {
        self.0
            .iter()
            .find(|w| w.name == registration.name)
            .unwrap_or(&self.0[0])
            .clone()
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
    /// The step it was created for.
    step: String,
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
        let mut behaviour = self.behaviour;
        match spec.args.get(1).map(String::as_str) {
            Some("-") => behaviour.exit_after = None,
            Some(ms) => behaviour.exit_after = ms.parse().ok().map(Duration::from_millis),
            None => {}
        }
        let (signals, mut inbox) = mpsc::unbounded_channel();
        let (exited, exit) = watch::channel(None);
        let (run, status) = {
            let mut record = self.record.lock().unwrap_or_else(|e| e.into_inner());
            record.started += 1;
            let earlier = record.runs.iter().filter(|r| r.step == self.step).count();
            let statuses: Vec<i32> = spec
                .args
                .first()
                .map(|a| a.split(',').filter_map(|s| s.parse().ok()).collect())
                .unwrap_or_default();
            let status = statuses
                .get(earlier)
                .or(statuses.last())
                .copied()
                .unwrap_or(0);
            record.runs.push(Run {
                step: self.step.clone(),
                started: Instant::now(),
                ended: None,
                signals: Vec::new(),
            });
            (record.runs.len() - 1, status)
        };
        let record = self.record.clone();
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
            record.lock().unwrap_or_else(|e| e.into_inner()).runs[run].ended =
                Some((Instant::now(), code));
            let _ = exited.send(Some(code));
        });
        Ok(Box::new(FakeProcess {
            id: spec.id,
            run,
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
    /// Its place in the record's runs.
    run: usize,
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
        {
            let mut record = self.record.lock().unwrap_or_else(|e| e.into_inner());
            record.signals.push((signal, Instant::now()));
            record.runs[self.run].signals.push(signal);
        }
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
            step: spec.properties.get("step").cloned().unwrap_or_default(),
            behaviour: self.behaviour,
            record: self.record.clone(),
        }))
    }
    async fn lookup_container(
        &self,
        handle: &str,
    ) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
        if !self.lock().containers.contains(handle) {
            return Ok(None);
        }
        Ok(Some(Arc::new(FakeContainer {
            handle: handle.to_string(),
            step: String::new(),
            behaviour: self.behaviour,
            record: self.record.clone(),
        })))
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
