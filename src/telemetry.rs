//! Logging and OpenTelemetry traces of the server processes (`web`,
//! `worker`, `quickstart`).
//!
//! Every process logs through `tracing` (human format or JSON on stderr).
//! When an OTLP endpoint is configured (`[telemetry] otlp_endpoint`, or the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT`), the process also exports its
//! spans: the `tracing` bridge (`tracing-opentelemetry`) turns the spans of
//! Gantry's own crates into OpenTelemetry spans, a batch processor sends
//! them as OTLP over HTTP/protobuf to `ENDPOINT/v1/traces`, and the W3C
//! trace context propagator is installed, so requests between the web node
//! and the workers carry `traceparent`. With no endpoint, none of that is
//! installed: no exporter, no batch thread, no propagator, no span leaves
//! the process.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// The standard variable naming the OTLP endpoint (a base URL; traces go
/// to its `/v1/traces`). It wins over the config file, as `GANTRY_*`
/// variables do.
pub const OTLP_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The crates whose spans are exported (others' spans, an HTTP client's
/// say, stay out of the traces).
const TRACED_CRATES: [&str; 4] = ["gantry", "gantry_actors", "gantry_agent", "gantry_wire"];

/// Where traces go (`[telemetry]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Base URL of an OTLP/HTTP receiver (a collector, Jaeger, Tempo ...),
    /// e.g. `http://127.0.0.1:4318`: spans are posted to its `/v1/traces`
    /// as protobuf. `OTEL_EXPORTER_OTLP_ENDPOINT` overrides it. Default:
    /// none, and then nothing is exported.
    pub otlp_endpoint: Option<String>,
}

impl TelemetryConfig {
    /// The endpoint in force: `OTEL_EXPORTER_OTLP_ENDPOINT` when set and
    /// not empty, else the file's; none when neither is.
    pub fn endpoint(&self) -> Option<String> {
        let env = std::env::var(OTLP_ENDPOINT_VAR).ok();
        Self::pick(env, self.otlp_endpoint.clone())
    }

    /// The variable's value over the file's, blanks ignored.
    fn pick(env: Option<String>, file: Option<String>) -> Option<String> {
        let given = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        given(env).or_else(|| given(file))
    }

    /// The URL spans are posted to: the endpoint's `/v1/traces`.
    pub fn traces_url(endpoint: &str) -> String {
        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
    }
}

/// Which process exports, as the resource of its spans says
/// (`service.name`, `service.instance.id`).
pub struct Service {
    /// `gantry-web`, `gantry-worker` or `gantry-quickstart`.
    pub name: &'static str,
    /// The web node's or the worker's name.
    pub instance: String,
}

/// The process's trace export, flushed and stopped by [`Telemetry::shutdown`].
#[must_use = "shut it down at exit, or the last spans are lost"]
pub struct Telemetry {
    /// The tracer provider when exporting; none without an endpoint.
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still batched and stops the exporter. Blocking: call
    /// it outside the async runtime, as the process exits.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(e) = provider.shutdown() {
                tracing::warn!("flushing the last spans: {e}");
            }
        }
    }
}

/// Sets up `tracing` (human format, coloured only on a terminal, or JSON
/// with `format` `json`; `RUST_LOG` filters the log) and, when `telemetry`
/// names an endpoint, the export of spans to it as `service`. Log lines
/// inside a build carry its `trace_id` (a field of the build's span).
pub fn init(
    format: &str,
    telemetry: &TelemetryConfig,
    service: Service,
) -> anyhow::Result<Telemetry> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only on a terminal: a log file or journal gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let fmt = if format == "json" {
        fmt.json().with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    let endpoint = telemetry.endpoint();
    let (provider, otel) = match &endpoint {
        Some(endpoint) => {
            let provider = provider(endpoint, service)?;
            let targets = TRACED_CRATES
                .iter()
                .fold(tracing_subscriber::filter::Targets::new(), |t, krate| {
                    t.with_target(*krate, tracing::Level::INFO)
                });
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("gantry"))
                .with_filter(targets);
            opentelemetry::global::set_text_map_propagator(
                opentelemetry_sdk::propagation::TraceContextPropagator::new(),
            );
            (Some(provider), Some(layer))
        }
        None => (None, None),
    };
    // A second set-up in one process (tests) keeps the first.
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    if let Some(endpoint) = &endpoint {
        tracing::info!(
            "exporting traces (OTLP over HTTP) to {}",
            TelemetryConfig::traces_url(endpoint)
        );
    }
    Ok(Telemetry { provider })
}

/// A tracer provider batching spans to `endpoint` as `service`.
fn provider(endpoint: &str, service: Service) -> anyhow::Result<SdkTracerProvider> {
    let url = TelemetryConfig::traces_url(endpoint);
    // The exporter's reqwest is built on rustls without a provider (as the
    // rest of the tree): ring, as everywhere in Gantry, for an https
    // endpoint. One installed already stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| anyhow::anyhow!("telemetry: cannot export traces to {url}: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service.name)
        .with_attributes([
            KeyValue::new("service.instance.id", service.instance),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    // The batch processor's delay and sizes follow the standard
    // `OTEL_BSP_*` variables (default: every 5 s).
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_over_the_file_and_blanks_count_as_unset() {
        let file = Some("http://file:4318".to_string());
        let env = Some("http://env:4318/".to_string());
        assert_eq!(
            TelemetryConfig::pick(env.clone(), file.clone()).as_deref(),
            Some("http://env:4318/")
        );
        assert_eq!(
            TelemetryConfig::pick(Some(" ".into()), file.clone()).as_deref(),
            Some("http://file:4318")
        );
        assert_eq!(TelemetryConfig::pick(None, Some(String::new())), None);
        assert_eq!(TelemetryConfig::pick(None, None), None);
        assert_eq!(
            TelemetryConfig::traces_url("http://env:4318/"),
            "http://env:4318/v1/traces"
        );
    }

    #[test]
    fn the_telemetry_table_is_read_and_unknown_keys_are_named() {
        let cfg: crate::config::FileConfig =
            toml::from_str("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n").unwrap();
        assert_eq!(
            cfg.telemetry.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4318")
        );
        let typo = toml::from_str::<crate::config::FileConfig>("[telemetry]\nendpoint = \"x\"\n")
            .unwrap_err();
        assert!(typo.to_string().contains("endpoint"), "{typo}");
    }
}
