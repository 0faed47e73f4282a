//! What the log reads of a stored build event's JSON: whether it is a log
//! line, and its text (of one step, if asked), read without a tree of
//! values. Shared by the text log (`build_log.rs`), its byte ranges
//! (`log_range.rs`) and the events stream that leaves stored log lines out
//! (`builds.rs`).

use std::borrow::Cow;

use serde::Deserialize;

/// Whether a stored event's JSON is a log line. The engine's events have
/// their tag first, a redacted build's their keys sorted (the tag last),
/// so those two are told without a parse; anything else is parsed for its
/// `type` alone.
pub fn is_log_line(json: &str) -> bool {
    if let Some(rest) = json.strip_prefix(r#"{"type":""#) {
        return rest.starts_with(r#"log""#);
    }
    if json.ends_with(r#","type":"log"}"#) {
        return true;
    }
    /// The tag of an event, read without copying.
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
    }
    serde_json::from_str::<Kind>(json).is_ok_and(|k| k.kind == "log")
}

/// What the log reads of a stored event ([`gantry_wire::events::BuildEvent`]
/// as JSON): its type and, for a log line, its step and text.
#[derive(Deserialize)]
struct LogFields<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    step: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    data: Option<Cow<'a, str>>,
}

/// The text of one stored event: its output, when it is a log line (of
/// `step`, if given). Only the three fields read are decoded, borrowed
/// from the event's text where they hold no escape (a 200 MB log is
/// millions of events: no tree of values, no copy of the others).
pub fn text_of(json: &str, step: Option<&str>) -> Option<String> {
    if !is_log_line(json) {
        return None;
    }
    let fields: LogFields = serde_json::from_str(json).ok()?;
    if fields.kind != "log" {
        return None;
    }
    let of = fields.step?;
    if step.is_some_and(|s| s != of) {
        return None;
    }
    fields.data.map(Cow::into_owned)
}
