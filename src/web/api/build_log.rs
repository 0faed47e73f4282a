//! `GET /api/v1/builds/{id}/log`: a build's log as plain text, what its
//! steps printed (standard output and error, as stored, redacted), streamed
//! from the build's events and followed live until the build ends. `?step=`
//! keeps one step's; `?tail=N` starts with the last N lines printed so far
//! (held in a ring of N lines while the stored events go by, so a huge log
//! costs the node N lines of memory) and then follows. `?upto=SEQ` reads
//! up to that event and does not follow. A `Range: bytes=...` header
//! answers that part of the text, not followed (`log_range.rs`).
//! `gantry watch --raw` and `--tail N` read it; the dashboard's log view
//! reads ranges.

use std::collections::VecDeque;

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use tokio::sync::mpsc;

use gantry_actors::api::{EngineError, StoredEvent};

use crate::web::api::builds::stored_up_to;
use crate::web::api::log_range::{self, ByteRange};
use crate::web::api::log_text::text_of;
use crate::web::api::public_pipelines::read_build;
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
    /// Read the events up to this one (a seq: `X-Gantry-Logs-After` of
    /// the events the reader follows) and do not follow.
    upto: Option<i64>,
}

/// `GET /api/v1/builds/{id}/log`: the build's output as plain text, live
/// until the build ends.
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}/log",
    operation_id = "buildLog",
    tag = "builds",
    params(
        ("id" = i64, Path, description = "The build"),
        LogQuery,
        ("Range" = Option<String>, Header, description = "One range of the text's bytes (`bytes=A-B`, `bytes=A-`, `bytes=-N`; at most 16 MiB answered): answered 206, read up to the events stored now (or `upto`), not followed"),
    ),
    responses(
        (status = 200, description = "What the build's steps printed, streamed until the build ends", content_type = "text/plain", body = String),
        (status = 206, description = "The range of the text asked (`Content-Range: bytes A-B/TOTAL`)", content_type = "text/plain", body = String,
            headers(("Content-Range" = String, description = "The bytes sent, and the text's length up to the events read"))),
        (status = 400, description = "A bad `tail`, `upto`, `Range`, or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = 416, description = "The range starts past the text's end (`Content-Range: bytes */TOTAL`)", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such build (or another team's)"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn log(
    req: HttpRequest,
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    query: web::Query<LogQuery>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let LogQuery { step, tail, upto } = query.into_inner();
    if let Some(n) = tail {
        if n == 0 || n > MAX_TAIL {
            return Err(ApiError::bad_request(format!(
                "tail {n}: give 1 to {MAX_TAIL} lines"
            )));
        }
    }
    if let Some(u) = upto.filter(|u| *u < 0) {
        return Err(ApiError::bad_request(format!(
            "upto {u}: give the seq of an event (0 or more)"
        )));
    }
    let range = match req.headers().get(actix_web::http::header::RANGE) {
        None => None,
        Some(v) => Some(ByteRange::parse(
            v.to_str()
                .map_err(|_| ApiError::bad_request("Range: not text"))?,
        )?),
    };
    if range.is_some() && tail.is_some() {
        return Err(ApiError::bad_request(
            "give either tail or a Range header, not both",
        ));
    }
    let (build, _) = read_build(&identity, &state, id, true).await?;
    // The events printed "so far": all of an ended build's, or a running
    // one's up to its last stored event now; `upto` stops sooner.
    let needs_bound = tail.is_some() || upto.is_some() || range.is_some();
    let stored = if needs_bound {
        stored_up_to(&state, &build).await?
    } else {
        0
    };
    let until = upto.map(|u| u.min(stored));
    if let Some(range) = range {
        return log_range::answer(&state, id, step.as_deref(), until.unwrap_or(stored), range)
            .await;
    }
    let boundary = if tail.is_some() {
        until.unwrap_or(stored)
    } else {
        0
    };
    let events = state.engine.follow_build_events(id, 0);
    let reader = LogReader {
        events,
        step,
        tail: tail.map(|n| Tail::new(n, boundary)),
        ended: until.is_some_and(|u| u <= 0),
        until,
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

/// Turns followed events into the log's text.
struct LogReader {
    events: mpsc::Receiver<Result<StoredEvent, EngineError>>,
    step: Option<String>,
    /// Held back until the boundary is passed; then none.
    tail: Option<Tail>,
    /// The last event read (none: follow until the build ends).
    until: Option<i64>,
    /// Whether that event was read.
    ended: bool,
}

impl LogReader {
    fn stream(self) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
        futures::stream::unfold(Some(self), |reader| async move {
            let mut reader = reader?;
            loop {
                let next = if reader.ended {
                    None
                } else {
                    reader.events.recv().await
                };
                let Some(next) = next else {
                    // The build ended: what was held back, if anything.
                    let rest = reader.tail.take().map(Tail::take).unwrap_or_default();
                    return (!rest.is_empty()).then(|| (Ok(bytes::Bytes::from(rest)), None));
                };
                let event = match next {
                    Ok(event) => event,
                    Err(e) => return Some((Err(std::io::Error::other(e.to_string())), None)),
                };
                if let Some(until) = reader.until {
                    reader.ended = event.seq >= until;
                    if event.seq > until {
                        continue;
                    }
                }
                let text = text_of(&event.json, reader.step.as_deref());
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
                until: None,
                ended: false,
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
        // Up to event 4, not followed.
        let mut upto = read(None, None);
        upto.until = Some(4);
        assert_eq!(text(upto).await, "1\n2\nx\n3\n");
        let mut none = read(None, Some((2, 4)));
        none.until = Some(0);
        none.ended = true;
        assert_eq!(text(none).await, "");
    }
}
