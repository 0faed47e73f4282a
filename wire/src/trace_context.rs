//! W3C trace context on the HTTP calls between the nodes of a fleet: a
//! request made inside a span carries its `traceparent` (the web node
//! calling an agent, an agent pulling from another agent). The agent's
//! side, serving a request that carries one inside a span of the same
//! trace, is the agent's (`gantry-agent`'s `trace_context.rs`).
//!
//! Both go through the process's global propagator, which the server
//! processes install only when they export traces: without it nothing is
//! injected, nothing is extracted and no request span is made.
//!
//! Behind the `trace` feature: the crates that make or serve HTTP calls
//! turn it on; the others build without reqwest and OpenTelemetry.

use opentelemetry::propagation::Injector;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C header a request's trace context travels in.
pub const TRACEPARENT: &str = "traceparent";

/// Headers of an outgoing request, written by the propagator.
struct OutHeaders<'a>(&'a mut reqwest::header::HeaderMap);

impl Injector for OutHeaders<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(key.as_bytes()),
            reqwest::header::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// `request` carrying the current span's trace context (`traceparent`),
/// when traces are exported; unchanged otherwise.
pub fn traced(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    let mut headers = reqwest::header::HeaderMap::new();
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut OutHeaders(&mut headers))
    });
    if headers.is_empty() {
        request
    } else {
        request.headers(headers)
    }
}
