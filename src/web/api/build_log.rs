//! `GET /api/v1/builds/{id}/log`: a build's log as plain text, what its
//! steps printed (standard output and error, as stored, redacted), streamed
//! from the build's events and followed live until the build ends. `?step=`
//! keeps one step's; `?tail=N` starts with the last N lines printed so far
//! (held in a ring of N lines while the stored events go by, so a huge log
//! costs the node N lines of memory) and then follows. `gantry watch --raw`
//! and `--tail N` read it.

use std::borrow::Cow;
use std::collections::VecDeque;

use actix_web::{web, HttpResponse};
use serde::Deserialize;
use tokio::sync::mpsc;

use gantry_actors::api::{EngineError, StoredEvent};

use crate::web::api::builds::visible_build;
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// The most lines `?tail=` keeps.
const MAX_TAIL: usize = 100_000;

/// Query of `GET /api/v1/builds/{id}/log`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// Only this step's output.
    step: Option<String>,
    /// Start with the last this many lines printed so far (1 to 100000),
    /// then follow.
    tail: Option<usize>,
}

/// `GET /api/v1/builds/{id}/log`: the build's output as plain text, live
/// until the build ends.
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}/log",
    operation_id = "buildLog",
    tag = "builds",
    params(("id" = i64, Path, description = "The build"), LogQuery),
    responses(
        (status = 200, description = "What the build's steps printed, streamed until the build ends", content_type = "text/plain", body = String),
        (status = 400, description = "A bad `tail` or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such build (or another team's)"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn log(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    query: web::Query<LogQuery>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let LogQuery { step, tail } = query.into_inner();
    if let Some(n) = tail {
        if n == 0 || n > MAX_TAIL {
            return Err(ApiError::bad_request(format!(
                "tail {n}: give 1 to {MAX_TAIL} lines"
            )));
        }
    }
    let build = visible_build(&identity, &state, id).await?;
    // The events printed "so far": all of an ended build's, or a running
    // one's up to its last stored event now.
    let boundary = match tail {
        None => 0,
        Some(_) if build.status.is_finished() => i64::MAX,
        Some(_) => state.engine.last_build_event_seq(id).await?,
    };
    let events = state.engine.follow_build_events(id, 0);
    let reader = LogReader {
        events,
        step,
        tail: tail.map(|n| Tail::new(n, boundary)),
    };
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .streaming(reader.stream()))
}

/// The last lines of the output up to an event, until they are sent.
struct Tail {
    keep: usize,
    /// The last event held back.
    boundary: i64,
    lines: VecDeque<String>,
    /// A line not ended yet.
    partial: String,
}

impl Tail {
    fn new(keep: usize, boundary: i64) -> Self {
        Self {
            keep,
            boundary,
            lines: VecDeque::new(),
            partial: String::new(),
        }
    }

    /// Holds `data` back, keeping the last lines.
    fn push(&mut self, data: &str) {
        self.partial.push_str(data);
        while let Some(at) = self.partial.find('\n') {
            let rest = self.partial.split_off(at + 1);
            let line = std::mem::replace(&mut self.partial, rest);
            self.lines.push_back(line);
            if self.lines.len() > self.keep {
                self.lines.pop_front();
            }
        }
    }

    /// What was held back: the last lines and the line not ended.
    fn take(self) -> String {
        let mut out: String = self.lines.into_iter().collect();
        out.push_str(&self.partial);
        out
    }
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

/// Turns followed events into the log's text.
struct LogReader {
    events: mpsc::Receiver<Result<StoredEvent, EngineError>>,
    step: Option<String>,
    /// Held back until the boundary is passed; then none.
    tail: Option<Tail>,
}

impl LogReader {
    /// The text of one event: its output, when it is a log line of the
    /// step asked for. Only the three fields read are decoded, borrowed
    /// from the event's text where they hold no escape (a 200 MB log is
    /// millions of events: no tree of values, no copy of the others).
    fn text_of(&self, json: &str) -> Option<String> {
        let fields: LogFields = serde_json::from_str(json).ok()?;
        if fields.kind != "log" {
            return None;
        }
        let step = fields.step?;
        if self.step.as_deref().is_some_and(|s| s != step) {
            return None;
        }
        fields.data.map(Cow::into_owned)
    }

    fn stream(self) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
        futures::stream::unfold(Some(self), |reader| async move {
            let mut reader = reader?;
            loop {
                let Some(next) = reader.events.recv().await else {
                    // The build ended: what was held back, if anything.
                    let rest = reader.tail.take().map(Tail::take).unwrap_or_default();
                    return (!rest.is_empty()).then(|| (Ok(bytes::Bytes::from(rest)), None));
                };
                let event = match next {
                    Ok(event) => event,
                    Err(e) => return Some((Err(std::io::Error::other(e.to_string())), None)),
                };
                let text = reader.text_of(&event.json);
                let out = match reader.tail.as_mut() {
                    Some(tail) if event.seq <= tail.boundary => {
                        if let Some(text) = &text {
                            tail.push(text);
                        }
                        if event.seq < tail.boundary && !event.is_final {
                            continue;
                        }
                        reader.tail.take().map(Tail::take).unwrap_or_default()
                    }
                    // Past the boundary with the lines still held (its
                    // event never came): they go first.
                    Some(_) => {
                        let mut held = reader.tail.take().map(Tail::take).unwrap_or_default();
                        held.push_str(text.as_deref().unwrap_or_default());
                        held
                    }
                    None => match text {
                        Some(text) => text,
                        None => continue,
                    },
                };
                if out.is_empty() {
                    continue;
                }
                return Some((Ok(bytes::Bytes::from(out)), Some(reader)));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_wire::events::BuildEvent;

    #[test]
    fn a_tail_keeps_the_last_lines_and_the_one_not_ended() {
        let mut tail = Tail::new(2, 0);
        tail.push("a\nb\n");
        tail.push("c\nd");
        tail.push("e\nf");
        assert_eq!(tail.take(), "c\nde\nf");
        let mut short = Tail::new(5, 0);
        short.push("only\n");
        assert_eq!(short.take(), "only\n");
    }

    #[tokio::test]
    async fn the_log_is_the_output_of_the_step_asked_and_a_tail_then_follows() {
        use futures::StreamExt as _;
        let log = |step: &str, data: &str| {
            serde_json::to_string(&BuildEvent::Log {
                step: step.into(),
                stream: "stdout".into(),
                data: data.into(),
                time: 1,
            })
            .unwrap()
        };
        let status = serde_json::to_string(&BuildEvent::status_at(
            gantry_wire::state::BuildStatus::Started,
            None,
            1,
        ))
        .unwrap();
        let events = vec![
            log("a", "1\n2\n"),
            status,
            log("b", "x\n"),
            log("a", "3\n"),
            log("a", "4 \"quoted\" \u{e9}\n"),
        ];
        let read = |step: Option<&str>, tail: Option<(usize, i64)>| {
            let (tx, rx) = mpsc::channel(events.len());
            for (seq, json) in (1..).zip(&events) {
                tx.try_send(Ok(StoredEvent {
                    seq,
                    json: json.clone(),
                    is_final: false,
                }))
                .unwrap();
            }
            drop(tx);
            LogReader {
                events: rx,
                step: step.map(String::from),
                tail: tail.map(|(n, b)| Tail::new(n, b)),
            }
        };
        let text = |r: LogReader| async move {
            let parts: Vec<_> = r.stream().collect().await;
            parts
                .into_iter()
                .map(|p| String::from_utf8(p.unwrap().to_vec()).unwrap())
                .collect::<String>()
        };
        let four = "4 \"quoted\" \u{e9}\n";
        assert_eq!(text(read(None, None)).await, format!("1\n2\nx\n3\n{four}"));
        assert_eq!(
            text(read(Some("a"), None)).await,
            format!("1\n2\n3\n{four}")
        );
        // The last two lines of the first four events, then event 5 live.
        assert_eq!(
            text(read(None, Some((2, 4)))).await,
            format!("x\n3\n{four}")
        );
        assert_eq!(
            text(read(Some("a"), Some((1, 4)))).await,
            format!("3\n{four}")
        );
        // An ended build: the last line of all.
        assert_eq!(text(read(None, Some((1, i64::MAX)))).await, four);
    }
}
