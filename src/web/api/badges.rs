//! Build status badges, as Concourse draws them (`atc/api/jobserver/
//! badge.go`, `atc/api/pipelineserver/badge.go`): an SVG saying `build |
//! passing` (or `failing`, `aborted`, `errored`, `unknown`) for a job's
//! finished build, or for the worst of a pipeline's jobs' finished
//! builds; `?title=` changes the left half. Read as the pipeline is: by
//! its team, or by anyone when it is exposed (what a project's README
//! shows).

use actix_web::{web, HttpResponse};
use gantry_actors::api::JobView;
use gantry_wire::state::BuildStatus;
use serde::Deserialize;

use crate::web::api::public_pipelines::{read_pipeline, Part};
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// A badge: its status's word and colour, its width, and its title.
#[derive(Debug, Clone, PartialEq)]
struct Badge {
    width: usize,
    fill: &'static str,
    status: &'static str,
    title: String,
    custom_title: bool,
}

impl Badge {
    /// The badge of a finished build's status (none: `unknown`).
    fn of(status: Option<BuildStatus>) -> Badge {
        let (width, fill, status) = match status {
            Some(BuildStatus::Succeeded) => (88, "#44cc11", "passing"),
            Some(BuildStatus::Failed) => (80, "#e05d44", "failing"),
            Some(BuildStatus::Aborted) => (90, "#8f4b2d", "aborted"),
            Some(BuildStatus::Errored) => (88, "#fe7d37", "errored"),
            _ => (98, "#9f9f9f", "unknown"),
        };
        Badge {
            width,
            fill,
            status,
            title: "build".into(),
            custom_title: false,
        }
    }

    /// With `title` on the left, widened as Concourse widens it.
    fn titled(mut self, title: &str) -> Badge {
        let status_width = self.width - 37;
        self.title = escape(title);
        self.custom_title = true;
        self.width = self.title_width() + status_width;
        self
    }

    fn title_width(&self) -> usize {
        if !self.custom_title {
            return 37;
        }
        // Concourse counts the escaped title's bytes.
        let len = self.title.len();
        let padding = match len {
            0..=8 => 12,
            9..=15 => 6,
            _ => 0,
        };
        len * 6 + padding
    }

    fn svg(&self) -> String {
        let (width, title_width) = (self.width, self.title_width());
        let status_width = width - title_width;
        let (title_x, status_x) = if self.custom_title {
            (
                format!("{:.1}", title_width as f64 / 2.0),
                format!("{:.1}", title_width as f64 + status_width as f64 / 2.0),
            )
        } else {
            (
                "18.5".to_string(),
                format!("{:.1}", width as f64 / 2.0 + 17.5),
            )
        };
        let (fill, title, status) = (self.fill, &self.title, self.status);
        format!(
            r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20">
   <linearGradient id="b" x2="0" y2="100%">
      <stop offset="0" stop-color="#bbb" stop-opacity=".1" />
      <stop offset="1" stop-opacity=".1" />
   </linearGradient>
   <mask id="a">
      <rect width="{width}" height="20" rx="3" fill="#fff" />
   </mask>
   <g mask="url(#a)">
      <path fill="#555" d="M0 0h{title_width}v20H0z" />
      <path fill="{fill}" d="M{title_width} 0h{status_width}v20H{title_width}z" />
      <path fill="url(#b)" d="M0 0h{width}v20H0z" />
   </g>
   <g fill="#fff" text-anchor="middle" font-family="DejaVu Sans,Verdana,Geneva,sans-serif" font-size="11">
      <text x="{title_x}" y="15" fill="#010101" fill-opacity=".3">{title}</text>
      <text x="{title_x}" y="14">{title}</text>
      <text x="{status_x}" y="15" fill="#010101" fill-opacity=".3">{status}</text>
      <text x="{status_x}" y="14">{status}</text>
   </g>
</svg>"##
        )
    }
}

/// `text` escaped as Go's `html.EscapeString` escapes it.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    out
}

/// The status a pipeline's badge shows: the worst of its jobs' finished
/// builds (failed, then errored, then aborted, then succeeded), none when
/// no job has one.
fn worst(jobs: &[JobView]) -> Option<BuildStatus> {
    let rank = |s: BuildStatus| match s {
        BuildStatus::Failed => 1,
        BuildStatus::Errored => 2,
        BuildStatus::Aborted => 3,
        BuildStatus::Succeeded => 4,
        _ => 5,
    };
    jobs.iter()
        .filter_map(|j| j.finished_build.as_ref().map(|b| b.status))
        .min_by_key(|s| rank(*s))
}

/// Query of a badge: its title.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BadgeQuery {
    /// The left half's text (default `build`).
    title: Option<String>,
}

/// The longest title drawn, in bytes.
const MAX_TITLE: usize = 64;

fn answer(status: Option<BuildStatus>, query: BadgeQuery) -> Result<HttpResponse, ApiError> {
    let mut badge = Badge::of(status);
    if let Some(title) = query.title.filter(|t| !t.is_empty()) {
        crate::web::api::bounds::check_text("title", &title, MAX_TITLE)?;
        badge = badge.titled(&title);
    }
    Ok(HttpResponse::Ok()
        .content_type("image/svg+xml")
        .insert_header(("Cache-Control", "no-cache, no-store, must-revalidate"))
        .insert_header(("Expires", "0"))
        .body(badge.svg()))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/badge`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/badge",
    operation_id = "jobBadge",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path), BadgeQuery),
    responses(
        (status = 200, description = "An SVG badge of the job's finished build", content_type = "image/svg+xml", body = String),
        (status = 400, description = "A title over 64 bytes, or an unknown parameter", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
    )
)]
pub async fn job(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    query: web::Query<BadgeQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, job) = path.into_inner();
    let part = Part {
        job: Some(&job),
        ..Part::default()
    };
    read_pipeline(&identity, &state, &team, &pipeline, part).await?;
    // The jobs' list, not `pipeline_job`: a badge needs no candidate
    // versions, and READMEs fetch badges often.
    let view = state
        .engine
        .pipeline_jobs(&team, &pipeline)
        .await?
        .into_iter()
        .find(|j| j.name == job)
        .ok_or_else(|| ApiError::not_found(format!("job {pipeline}/{job} not found")))?;
    answer(view.finished_build.map(|b| b.status), query.into_inner())
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/badge`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/badge",
    operation_id = "pipelineBadge",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), BadgeQuery),
    responses(
        (status = 200, description = "An SVG badge of the worst of its jobs' finished builds", content_type = "image/svg+xml", body = String),
        (status = 400, description = "A title over 64 bytes, or an unknown parameter", body = ErrorBody),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn pipeline(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    query: web::Query<BadgeQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline) = path.into_inner();
    read_pipeline(&identity, &state, &team, &pipeline, Part::default()).await?;
    let jobs = state.engine.pipeline_jobs(&team, &pipeline).await?;
    answer(worst(&jobs), query.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn badges_are_as_wide_and_placed_as_concourses() {
        let passing = Badge::of(Some(BuildStatus::Succeeded));
        let svg = passing.svg();
        assert!(
            svg.contains(r#"width="88""#) && svg.contains("#44cc11"),
            "{svg}"
        );
        assert!(
            svg.contains(r#"<text x="18.5" y="14">build</text>"#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"<text x="61.5" y="14">passing</text>"#),
            "{svg}"
        );
        // A custom title: 2 bytes, 6 each and 12 of padding; the status
        // keeps its width (88 - 37).
        let titled = Badge::of(Some(BuildStatus::Succeeded)).titled("ci");
        assert_eq!((titled.title_width(), titled.width), (24, 75));
        let svg = titled.svg();
        assert!(svg.contains(r#"<text x="12.0" y="14">ci</text>"#), "{svg}");
        assert!(
            svg.contains(r#"<text x="49.5" y="14">passing</text>"#),
            "{svg}"
        );
        let escaped = Badge::of(None).titled("<a&b>");
        assert_eq!(escaped.title, "&lt;a&amp;b&gt;");
        assert_eq!(escaped.status, "unknown");
    }

    #[test]
    fn a_pipelines_badge_is_its_worst_finished_build() {
        let job = |status: Option<BuildStatus>| -> JobView {
            let mut v: JobView = serde_json::from_value(serde_json::json!({
                "name": "j", "paused": false, "latest_build": null,
                "finished_build": null, "next_build": null,
                "inputs": [], "outputs": [], "decision": null
            }))
            .unwrap();
            v.finished_build = status.map(|s| {
                serde_json::from_value(serde_json::json!({
                    "id": 1, "team": "main", "status": s.as_str(), "plan": null,
                    "worker": null, "exit_status": null, "error": null,
                    "created_at": 0, "finished_at": null, "log": "database", "name": "1"
                }))
                .unwrap()
            });
            v
        };
        use BuildStatus::*;
        assert_eq!(worst(&[]), None);
        assert_eq!(worst(&[job(None)]), None);
        assert_eq!(
            worst(&[job(Some(Succeeded)), job(Some(Aborted)), job(None)]),
            Some(Aborted)
        );
        assert_eq!(
            worst(&[job(Some(Errored)), job(Some(Failed)), job(Some(Succeeded))]),
            Some(Failed)
        );
    }
}
