//! A build's place in a trace: the ids of its OpenTelemetry span, told in
//! its `started` event and read back when another web node takes it over.
//!
//! The engine only makes `tracing` spans (a build, its steps, placement,
//! stream transfers, image and resource fetches, processes); whether they
//! become OpenTelemetry spans, and where they go, is the server process's
//! choice (the `tracing` bridge it installs, or none). Without it every
//! function here answers none.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// A span's ids in its trace, in W3C hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceIds {
    /// The trace (32 hex digits).
    pub trace_id: String,
    /// The span (16 hex digits).
    pub span_id: String,
}

impl TraceIds {
    /// The ids of `span`'s OpenTelemetry span (which this starts); none
    /// when spans are not exported.
    pub(crate) fn of(span: &tracing::Span) -> Option<TraceIds> {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| TraceIds {
            trace_id: sc.trace_id().to_string(),
            span_id: sc.span_id().to_string(),
        })
    }

    /// The ids a `started` event told, when both are there and valid.
    pub(crate) fn told(trace_id: Option<String>, span_id: Option<String>) -> Option<TraceIds> {
        let ids = TraceIds {
            trace_id: trace_id?,
            span_id: span_id?,
        };
        ids.span_context().map(|_| ids)
    }

    /// The span these ids name, as a remote (sampled) parent.
    fn span_context(&self) -> Option<SpanContext> {
        let trace = TraceId::from_hex(&self.trace_id).ok()?;
        let span = SpanId::from_hex(&self.span_id).ok()?;
        let sc = SpanContext::new(trace, span, TraceFlags::SAMPLED, true, Default::default());
        sc.is_valid().then_some(sc)
    }

    /// Makes `span` (not yet started) a child of the span these ids name:
    /// a build taken over stays in the trace it began in.
    pub(crate) fn adopt(&self, span: &tracing::Span) {
        if let Some(sc) = self.span_context() {
            let parent = opentelemetry::Context::new().with_remote_span_context(sc);
            // Fails only when spans are not exported: nothing to adopt.
            let _ = span.set_parent(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn told_ids_are_taken_only_whole_and_valid() {
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736".to_string();
        let span = "00f067aa0ba902b7".to_string();
        let ids = TraceIds::told(Some(trace.clone()), Some(span.clone())).unwrap();
        assert_eq!(
            (ids.trace_id.as_str(), ids.span_id.as_str()),
            (&*trace, &*span)
        );
        assert_eq!(TraceIds::told(Some(trace.clone()), None), None);
        assert_eq!(TraceIds::told(None, Some(span.clone())), None);
        assert_eq!(TraceIds::told(Some("zz".into()), Some(span)), None);
        assert_eq!(
            TraceIds::told(Some(trace), Some("0000000000000000".into())),
            None
        );
    }

    #[test]
    fn without_an_exporter_a_span_has_no_ids() {
        // No OpenTelemetry layer is installed in unit tests.
        let span = tracing::info_span!("build");
        assert_eq!(TraceIds::of(&span), None);
    }
}
