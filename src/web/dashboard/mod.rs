//! The dashboard: its page, script and style sheet (embedded in the binary,
//! nothing fetched from elsewhere), its live feeds (`feed.rs`: the fleet;
//! `page_feed.rs`: a pipeline's pages) and the snapshots its fleet feeds
//! share (`snapshots.rs`).

pub mod feed;
pub mod page_feed;
mod snapshots;

use actix_web::HttpResponse;

pub use snapshots::SharedSnapshots;

/// `GET /`: the dashboard's page (no token needed: it holds no data, and
/// asks the API with the token it is given).
#[utoipa::path(
    get,
    path = "/",
    operation_id = "dashboard",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn page() -> HttpResponse {
    asset("text/html; charset=utf-8", include_str!("index.html"))
}

/// `GET /login`: the sign-in page (a local user's name and password; the
/// session is set as a cookie).
#[utoipa::path(
    get,
    path = "/login",
    operation_id = "dashboardLogin",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The sign-in page (HTML)", content_type = "text/html", body = String))
)]
pub async fn login_page() -> HttpResponse {
    asset("text/html; charset=utf-8", include_str!("login.html"))
}

/// `GET /builds/{id}`: the dashboard's page of a build (the same page: it
/// routes on `location.pathname` itself).
#[utoipa::path(
    get,
    path = "/builds/{id}",
    operation_id = "dashboardBuild",
    tag = "operations",
    security(()),
    params(("id" = i64, Path, description = "The build")),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn build_page() -> HttpResponse {
    page().await
}

/// `GET /workers`: the dashboard's page of the fleet's workers, with their load, tags and volume stores (the same page,
/// routed by its script, following the fleet's feed).
#[utoipa::path(
    get,
    path = "/workers",
    operation_id = "dashboardWorkers",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn workers_page() -> HttpResponse {
    page().await
}

/// `GET /queue`: the dashboard's page of the steps waiting for a worker, by the kind of worker they need (the same page,
/// routed by its script, following the fleet's feed).
#[utoipa::path(
    get,
    path = "/queue",
    operation_id = "dashboardQueue",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn queue_page() -> HttpResponse {
    page().await
}

/// `GET /collector`: the dashboard's page of the garbage collector: rows by state, sweeps, rules, and the containers and volumes (the same page,
/// routed by its script, following the fleet's feed).
#[utoipa::path(
    get,
    path = "/collector",
    operation_id = "dashboardCollector",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn collector_page() -> HttpResponse {
    page().await
}

/// `GET /teams/{team}/pipelines/{pipeline}`: the dashboard's page of a
/// stored pipeline (the same page, routed by its script).
#[utoipa::path(
    get,
    path = "/teams/{team}/pipelines/{pipeline}",
    operation_id = "dashboardPipeline",
    tag = "operations",
    security(()),
    params(("team" = String, Path), ("pipeline" = String, Path)),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn pipeline_page() -> HttpResponse {
    page().await
}

/// `GET /teams/{team}/pipelines/{pipeline}/jobs/{job}`: a job's page.
#[utoipa::path(
    get,
    path = "/teams/{team}/pipelines/{pipeline}/jobs/{job}",
    operation_id = "dashboardJob",
    tag = "operations",
    security(()),
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path)),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn job_page() -> HttpResponse {
    page().await
}

/// `GET /teams/{team}/pipelines/{pipeline}/resources/{resource}`: a
/// resource's page.
#[utoipa::path(
    get,
    path = "/teams/{team}/pipelines/{pipeline}/resources/{resource}",
    operation_id = "dashboardResource",
    tag = "operations",
    security(()),
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    responses((status = 200, description = "The dashboard (HTML)", content_type = "text/html", body = String))
)]
pub async fn resource_page() -> HttpResponse {
    page().await
}

/// `GET /dashboard/pipelines.js`: the script of the pipeline pages.
#[utoipa::path(
    get,
    path = "/dashboard/pipelines.js",
    operation_id = "dashboardPipelinesScript",
    tag = "operations",
    security(()),
    responses((status = 200, description = "JavaScript", content_type = "text/javascript", body = String))
)]
pub async fn pipelines_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("pipelines.js"),
    )
}

/// `GET /dashboard/logview.js`: the script of a build's log view.
#[utoipa::path(
    get,
    path = "/dashboard/logview.js",
    operation_id = "dashboardLogScript",
    tag = "operations",
    security(()),
    responses((status = 200, description = "JavaScript", content_type = "text/javascript", body = String))
)]
pub async fn log_script() -> HttpResponse {
    asset("text/javascript; charset=utf-8", include_str!("logview.js"))
}

/// `GET /dashboard/feed-worker.js`: the shared worker holding one stream
/// per feed for all of a browser's Gantry tabs.
#[utoipa::path(
    get,
    path = "/dashboard/feed-worker.js",
    operation_id = "dashboardFeedWorker",
    tag = "operations",
    security(()),
    responses((status = 200, description = "JavaScript", content_type = "text/javascript", body = String))
)]
pub async fn feed_worker_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("feed-worker.js"),
    )
}

/// `GET /dashboard/app.js`: the dashboard's script.
#[utoipa::path(
    get,
    path = "/dashboard/app.js",
    operation_id = "dashboardScript",
    tag = "operations",
    security(()),
    responses((status = 200, description = "JavaScript", content_type = "text/javascript", body = String))
)]
pub async fn script() -> HttpResponse {
    asset("text/javascript; charset=utf-8", include_str!("app.js"))
}

/// `GET /dashboard/style.css`: the dashboard's style sheet.
#[utoipa::path(
    get,
    path = "/dashboard/style.css",
    operation_id = "dashboardStyle",
    tag = "operations",
    security(()),
    responses((status = 200, description = "CSS", content_type = "text/css", body = String))
)]
pub async fn style() -> HttpResponse {
    asset("text/css; charset=utf-8", include_str!("style.css"))
}

/// An embedded file of the dashboard.
fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("cache-control", "no-cache"))
        .body(body)
}
