//! How artifacts move between workers: the path per link, the encoding,
//! the caps on concurrent streams and how long a signed URL lives.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::EngineError;
use gantry_wire::spec::Encoding;

/// The path bytes take from one worker to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// The destination worker pulls from the source worker with a signed,
    /// short-lived URL: the bytes never touch the web node.
    P2p,
    /// The web node reads from the source worker and writes to the
    /// destination, with bounded memory: for workers that cannot reach each
    /// other.
    Relay,
}

impl StreamMode {
    /// The name used in configuration, events and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            StreamMode::P2p => "p2p",
            StreamMode::Relay => "relay",
        }
    }

    /// Parses `p2p` or `relay`.
    pub fn parse(s: &str) -> Result<Self, EngineError> {
        match s {
            "p2p" => Ok(StreamMode::P2p),
            "relay" => Ok(StreamMode::Relay),
            other => Err(EngineError::Invalid(format!(
                "unknown stream mode {other:?}: use \"p2p\" or \"relay\""
            ))),
        }
    }
}

/// The mode of the streams from worker `from` to worker `to` (`*` matches
/// any worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRule {
    /// Source worker name, or `*`.
    pub from: String,
    /// Destination worker name, or `*`.
    pub to: String,
    /// The mode of that link.
    pub mode: StreamMode,
}

impl LinkRule {
    /// Whether the rule covers streams from `from` to `to`.
    fn matches(&self, from: &str, to: &str) -> bool {
        (self.from == "*" || self.from == from) && (self.to == "*" || self.to == to)
    }
}

/// Default cap on concurrent streams out of, and into, each worker.
pub const DEFAULT_MAX_STREAMS: usize = 4;

/// Default life of a signed stream URL.
pub const DEFAULT_URL_TTL: Duration = Duration::from_secs(60);

/// Streaming configuration of a web node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConfig {
    /// The fleet's mode, for links no rule names.
    pub mode: StreamMode,
    /// Per-link modes; the first rule that matches wins.
    pub links: Vec<LinkRule>,
    /// Encoding of every stream to and between workers.
    pub encoding: Encoding,
    /// Concurrent streams out of one worker; more wait in order.
    pub max_out: usize,
    /// Concurrent streams into one worker; more wait in order.
    pub max_in: usize,
    /// How long a signed stream URL is accepted after it is made.
    pub url_ttl: Duration,
    /// Whether a worker pulling a registry image takes its blobs from
    /// workers that hold the image before the registry (one pull per fleet).
    pub image_peers: bool,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            mode: StreamMode::P2p,
            links: Vec::new(),
            encoding: Encoding::default(),
            max_out: DEFAULT_MAX_STREAMS,
            max_in: DEFAULT_MAX_STREAMS,
            url_ttl: DEFAULT_URL_TTL,
            image_peers: true,
        }
    }
}

impl StreamConfig {
    /// The mode of streams from worker `from` to worker `to`.
    pub fn mode_for(&self, from: &str, to: &str) -> StreamMode {
        self.links
            .iter()
            .find(|r| r.matches(from, to))
            .map_or(self.mode, |r| r.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_link_rule_wins_over_the_fleet_mode() {
        let config = StreamConfig {
            links: vec![
                LinkRule {
                    from: "a".into(),
                    to: "b".into(),
                    mode: StreamMode::P2p,
                },
                LinkRule {
                    from: "a".into(),
                    to: "*".into(),
                    mode: StreamMode::Relay,
                },
            ],
            ..StreamConfig::default()
        };
        assert_eq!(config.mode_for("a", "b"), StreamMode::P2p);
        assert_eq!(config.mode_for("a", "c"), StreamMode::Relay);
        assert_eq!(config.mode_for("c", "a"), StreamMode::P2p);
        assert!(StreamMode::parse("carrier-pigeon").is_err());
    }
}
