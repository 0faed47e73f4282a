//! Counters of transfers, for `/metrics`: bytes by path and encoding,
//! transfers, failures and seconds spent by path (each completed
//! transfer's time also goes to a histogram, see [`crate::histograms`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

use gantry_wire::spec::Encoding;

/// The path of one transfer's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferPath {
    /// Worker to worker directly.
    P2p,
    /// Worker to worker through the web node.
    Relay,
    /// From the web node's store to a worker.
    Web,
}

impl TransferPath {
    /// Every path a transfer takes.
    pub const ALL: [TransferPath; 3] = [TransferPath::P2p, TransferPath::Relay, TransferPath::Web];
    /// `p2p`, `relay` or `web`.
    pub fn as_str(&self) -> &'static str {
        match self {
            TransferPath::P2p => "p2p",
            TransferPath::Relay => "relay",
            TransferPath::Web => "web",
        }
    }
}

impl From<super::StreamMode> for TransferPath {
    fn from(mode: super::StreamMode) -> Self {
        match mode {
            super::StreamMode::P2p => TransferPath::P2p,
            super::StreamMode::Relay => TransferPath::Relay,
        }
    }
}

/// Totals of one path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PathTotals {
    /// Transfers that completed.
    pub transfers: u64,
    /// Transfers that failed.
    pub failures: u64,
    /// Seconds spent by completed transfers.
    pub seconds: f64,
}

/// What transfers have done since the web node started.
#[derive(Default)]
pub struct StreamStats {
    /// Bytes on the wire by (path, encoding).
    bytes: Mutex<BTreeMap<(TransferPath, &'static str), u64>>,
    /// Totals by path.
    totals: Mutex<BTreeMap<TransferPath, PathTotals>>,
}

impl StreamStats {
    /// Counts a completed transfer.
    pub fn completed(&self, path: TransferPath, encoding: Encoding, bytes: u64, seconds: f64) {
        *self
            .bytes
            .lock()
            .expect("stream stats")
            .entry((path, encoding.as_str()))
            .or_default() += bytes;
        let mut totals = self.totals.lock().expect("stream stats");
        let t = totals.entry(path).or_default();
        t.transfers += 1;
        t.seconds += seconds;
        crate::histograms::transfer_completed(path.as_str(), seconds);
    }

    /// Counts a failed transfer.
    pub fn failed(&self, path: TransferPath) {
        self.totals
            .lock()
            .expect("stream stats")
            .entry(path)
            .or_default()
            .failures += 1;
    }

    /// Bytes by (path, encoding), every path and encoding listed (zero when
    /// nothing went that way), so a counter exists before it first moves.
    pub fn bytes(&self) -> BTreeMap<(TransferPath, &'static str), u64> {
        let seen = self.bytes.lock().expect("stream stats");
        let mut all = BTreeMap::new();
        for path in [TransferPath::P2p, TransferPath::Relay, TransferPath::Web] {
            for encoding in [Encoding::Zstd, Encoding::Gzip, Encoding::Raw] {
                let key = (path, encoding.as_str());
                all.insert(key, seen.get(&key).copied().unwrap_or(0));
            }
        }
        all
    }

    /// Totals by path, every path listed.
    pub fn totals(&self) -> BTreeMap<TransferPath, PathTotals> {
        let seen = self.totals.lock().expect("stream stats");
        [TransferPath::P2p, TransferPath::Relay, TransferPath::Web]
            .into_iter()
            .map(|p| (p, seen.get(&p).copied().unwrap_or_default()))
            .collect()
    }
}
