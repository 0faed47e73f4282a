//! W3C trace context on the agent's side of a call: the agent serves a
//! request that carries a `traceparent` inside a span of the same trace.
//! Its own outgoing calls (pulling from another agent) carry theirs through
//! `gantry_wire::trace_context::traced`, as the web node's do.
//!
//! Both go through the process's global propagator, which the server
//! processes install only when they export traces: without it nothing is
//! injected, nothing is extracted and no request span is made.

use gantry_wire::trace_context::TRACEPARENT;
use opentelemetry::propagation::Extractor;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Headers of an incoming request, read by the propagator.
struct InHeaders<'a>(&'a actix_web::http::header::HeaderMap);

impl Extractor for InHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The span an agent serves `req` in: a child of the caller's span when the
/// request carries a valid `traceparent` (and traces are exported), its
/// name the route's method and pattern; none otherwise.
pub fn request_span(req: &actix_web::dev::ServiceRequest) -> Option<tracing::Span> {
    req.headers().get(TRACEPARENT)?;
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&InHeaders(req.headers())));
    use opentelemetry::trace::TraceContextExt as _;
    if !parent.span().span_context().is_valid() {
        return None;
    }
    let route = req
        .match_pattern()
        .unwrap_or_else(|| req.path().to_string());
    let name = format!("{} {route}", req.method());
    let span = tracing::info_span!(
        "agent request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %req.method(),
        http.route = %route,
        trace_id = tracing::field::Empty,
    );
    // Only fails when no layer exports spans (then the span is disabled).
    let _ = span.set_parent(parent.clone());
    span.record(
        "trace_id",
        tracing::field::display(parent.span().span_context().trace_id()),
    );
    Some(span)
}

/// Serves `next` inside the request's span (see [`request_span`]).
pub async fn serve_traced<F: std::future::Future>(
    span: Option<tracing::Span>,
    next: F,
) -> F::Output {
    match span {
        Some(span) => next.instrument(span).await,
        None => next.await,
    }
}
