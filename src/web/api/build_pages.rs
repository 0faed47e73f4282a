//! Concourse's paging of the build lists (`ListBuilds`, `ListTeamBuilds`,
//! `ListPipelineBuilds`, `ListJobBuilds`), beside Gantry's cursors
//! ([`crate::web::api::paging`]): a request that gives `from`, `to` or
//! `timestamps` is answered as Concourse answers it (`atc/db`'s
//! `getBuildsWithPagination` and `getBuildsWithDates`):
//! - `to=N`: the newest `limit` builds with ids up to N; `from=N`: the
//!   oldest `limit` with ids from N (shown newest first); both: the oldest
//!   `limit` between them;
//! - `timestamps` (fly's `builds --since/--until`): `from` and `to` are unix
//!   seconds bounding when the builds started (`to`'s whole second
//!   included: Concourse compares to the second's start), newest first,
//!   and no links are written;
//! - `Link: <PATH?to=N&limit=L>; rel="next"` when older builds follow (N:
//!   the newest of them), `<PATH?from=N&limit=L>; rel="previous"` when
//!   newer ones do (N: the oldest of them), the request's other filters
//!   kept. Concourse writes its external URL before the path; Gantry
//!   writes the path alone, as its own links are.
//!
//! Builds are ordered by id (Concourse keeps a job's reruns beside the
//! build they rerun).

use actix_web::{HttpRequest, HttpResponse};
use gantry_actors::api::{Build, BuildQuery};
use serde::Deserialize;

use crate::web::api::paging::Page;
use crate::web::error::ApiError;
use crate::web::AppState;

/// `limit` and `cursor` (Gantry's paging) or `from`, `to` and
/// `timestamps` (Concourse's) of a list of builds.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BuildPageQuery {
    /// Most builds in the page: 1 to 500, default 100.
    pub limit: Option<u32>,
    /// Gantry's paging: where the page starts, the cursor of the link to
    /// the next page.
    pub cursor: Option<String>,
    /// Concourse's paging: builds with this id or a greater one (with
    /// `timestamps`: that started at this unix second or later).
    pub from: Option<i64>,
    /// Concourse's paging: builds with this id or a smaller one (with
    /// `timestamps`: that started at this unix second or earlier).
    pub to: Option<i64>,
    /// Concourse's: any value makes `from` and `to` times (fly's `builds
    /// --since/--until`).
    pub timestamps: Option<String>,
}

/// A request's Concourse paging: its bounds, and whether they are times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// `from`.
    pub from: Option<i64>,
    /// `to`.
    pub to: Option<i64>,
    /// `timestamps` was given.
    pub timestamps: bool,
}

impl Window {
    /// The request's Concourse paging, if it asks for it (none: Gantry's
    /// cursors page it); refuses a cursor beside it, and bounds the wrong
    /// way round.
    pub fn of(
        from: Option<i64>,
        to: Option<i64>,
        timestamps: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<Option<Window>, ApiError> {
        let timestamps = timestamps.is_some_and(|t| !t.is_empty());
        if from.is_none() && to.is_none() && !timestamps {
            return Ok(None);
        }
        if cursor.is_some() {
            return Err(ApiError::bad_request(
                "cursor is Gantry's paging, from/to Concourse's: give one of them",
            ));
        }
        if let (Some(f), Some(t)) = (from, to) {
            if f > t {
                return Err(ApiError::bad_request(format!(
                    "from {f} is after to {t}: invalid range boundaries"
                )));
            }
        }
        if from.is_some_and(|f| f < 0) || to.is_some_and(|t| t < 0) {
            return Err(ApiError::bad_request("from and to are 0 or more"));
        }
        Ok(Some(Window {
            from,
            to,
            timestamps,
        }))
    }

    /// The query of the page: `base`'s filters within the window's bounds.
    fn query(&self, base: &BuildQuery, limit: i64) -> BuildQuery {
        let mut q = BuildQuery {
            limit,
            before: None,
            ..base.clone()
        };
        if self.timestamps {
            q.started_from = self.from.map(|s| s.saturating_mul(1000));
            // The whole second `to` names: a build the API says started
            // at `to` (unix seconds) is in.
            q.started_until = self.to.map(|s| s.saturating_mul(1000).saturating_add(999));
        } else {
            q.from = self.from;
            q.before = self.to.map(|t| t.saturating_add(1));
            q.oldest_first = self.from.is_some();
        }
        q
    }
}

/// Answers a page of the builds `base` filters in `window`, as Concourse
/// does, each shown through `show`.
pub async fn answer(
    state: &AppState,
    req: &HttpRequest,
    base: BuildQuery,
    limit: Option<u32>,
    window: Window,
    show: impl Fn(Build) -> Build,
) -> Result<HttpResponse, ApiError> {
    let limit = Page::new(limit, None)?.limit;
    let query = window.query(&base, i64::from(limit));
    let mut builds = state.engine.list_builds_page(&query).await?;
    if query.oldest_first {
        builds.reverse();
    }
    let mut answer = HttpResponse::Ok();
    if !window.timestamps {
        if let (Some(newest), Some(oldest)) = (builds.first(), builds.last()) {
            let older = BuildQuery {
                limit: 1,
                before: Some(oldest.id),
                ..base.clone()
            };
            let newer = BuildQuery {
                limit: 1,
                from: Some(newest.id.saturating_add(1)),
                oldest_first: true,
                ..base.clone()
            };
            if let Some(b) = state.engine.list_builds_page(&older).await?.first() {
                answer.append_header(("link", link(req, "to", b.id, limit, "next")));
            }
            if let Some(b) = state.engine.list_builds_page(&newer).await?.first() {
                answer.append_header(("link", link(req, "from", b.id, limit, "previous")));
            }
        }
    }
    let builds: Vec<Build> = builds.into_iter().map(show).collect();
    Ok(answer.json(builds))
}

/// A `Link` as Concourse writes it: the request's path with `bound=id`
/// and `limit` first, then its other filters.
fn link(req: &HttpRequest, bound: &str, id: i64, limit: u32, rel: &str) -> String {
    let mut pairs: Vec<(String, String)> = vec![
        (bound.to_string(), id.to_string()),
        ("limit".to_string(), limit.to_string()),
    ];
    let asked: Vec<(String, String)> =
        serde_urlencoded::from_str(req.query_string()).unwrap_or_default();
    pairs.extend(
        asked.into_iter().filter(|(k, _)| {
            !["from", "to", "limit", "cursor", "timestamps"].contains(&k.as_str())
        }),
    );
    let query = serde_urlencoded::to_string(&pairs).unwrap_or_default();
    format!("<{}?{query}>; rel=\"{rel}\"", req.path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn a_window_is_asked_by_from_to_or_timestamps() {
        assert_eq!(Window::of(None, None, None, Some("5")).unwrap(), None);
        assert_eq!(Window::of(None, None, Some(""), None).unwrap(), None);
        let w = Window::of(Some(3), None, None, None).unwrap().unwrap();
        let q = w.query(&BuildQuery::default(), 10);
        assert_eq!((q.from, q.before, q.oldest_first), (Some(3), None, true));
        let w = Window::of(None, Some(7), None, None).unwrap().unwrap();
        let q = w.query(&BuildQuery::default(), 10);
        assert_eq!((q.from, q.before, q.oldest_first), (None, Some(8), false));
        let w = Window::of(Some(60), Some(120), Some("true"), None)
            .unwrap()
            .unwrap();
        let q = w.query(&BuildQuery::default(), 10);
        assert_eq!(
            (q.started_from, q.started_until),
            (Some(60_000), Some(120_999))
        );
        assert_eq!((q.from, q.before), (None, None));
        assert!(Window::of(Some(9), Some(3), None, None).is_err());
        assert!(Window::of(Some(1), None, None, Some("4")).is_err());
    }

    #[test]
    fn links_keep_the_other_filters() {
        let req = TestRequest::get()
            .uri("/api/v1/builds?team=main&to=9&limit=2")
            .to_http_request();
        assert_eq!(
            link(&req, "to", 4, 2, "next"),
            "</api/v1/builds?to=4&limit=2&team=main>; rel=\"next\""
        );
    }
}
