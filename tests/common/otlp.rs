//! A real OTLP/HTTP trace receiver on loopback: it answers `POST
//! /v1/traces` as a collector does, decoding each body as the protocol's
//! own `ExportTraceServiceRequest` (protobuf, the `opentelemetry-proto`
//! types), and keeps every span it was sent with the resource that sent
//! it. What the nodes under test export is read back from here.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// Its trace (32 hex digits).
    pub trace_id: String,
    /// Its id (16 hex digits).
    pub span_id: String,
    /// Its parent's id, empty for a root span.
    pub parent_id: String,
    /// Its attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// The attributes of the resource that sent it (`service.name`,
    /// `service.instance.id`, ...).
    pub resource: BTreeMap<String, String>,
}

impl ReceivedSpan {
    /// The sender's `service.name`.
    pub fn service(&self) -> &str {
        self.resource.get("service.name").map_or("", String::as_str)
    }

    /// The sender's `service.instance.id` (a worker's or web node's name).
    pub fn instance(&self) -> &str {
        self.resource
            .get("service.instance.id")
            .map_or("", String::as_str)
    }

    /// Attribute `key`, as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// The receiver: a thread accepting connections on a loopback port.
pub struct Receiver {
    /// Base URL to configure as the OTLP endpoint (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Every span received so far, in order.
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// Export requests received (each a batch of spans).
    requests: Arc<Mutex<usize>>,
}

impl Receiver {
    /// Starts a receiver on a free loopback port.
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans: Arc<Mutex<Vec<ReceivedSpan>>> = Arc::default();
        let requests: Arc<Mutex<usize>> = Arc::default();
        let (kept, counted) = (spans.clone(), requests.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (kept, counted) = (kept.clone(), counted.clone());
                std::thread::spawn(move || serve(conn, &kept, &counted));
            }
        });
        Receiver {
            url,
            spans,
            requests,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of trace `trace_id` received so far.
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }

    /// How many export requests arrived.
    pub fn requests(&self) -> usize {
        *self.requests.lock().unwrap()
    }
}

/// Serves one connection: requests one after another (keep-alive) until
/// the client closes it.
fn serve(conn: TcpStream, kept: &Mutex<Vec<ReceivedSpan>>, counted: &Mutex<usize>) {
    let mut writer = conn.try_clone().expect("clone the connection");
    let mut reader = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                _ => {}
            }
        }
        let body = if chunked {
            read_chunked(&mut reader)
        } else {
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            Some(body)
        };
        let Some(body) = body else { return };
        let (status, answer) = if !request_line.starts_with("POST /v1/traces ") {
            ("404 Not Found", Vec::new())
        } else {
            match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    kept.lock().unwrap().extend(spans_of(request));
                    *counted.lock().unwrap() += 1;
                    // An empty ExportTraceServiceResponse: all accepted.
                    ("200 OK", Vec::new())
                }
                Err(e) => ("400 Bad Request", e.to_string().into_bytes()),
            }
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&answer).is_err() {
            return;
        }
    }
}

/// A chunked body, whole; none when the connection broke.
fn read_chunked(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// The spans of one export request, each with its resource.
fn spans_of(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let resource = attributes(&rs.resource.map(|r| r.attributes).unwrap_or_default());
        for ss in rs.scope_spans {
            for span in ss.spans {
                out.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

/// Attributes with their values as text.
fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// Bytes as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
