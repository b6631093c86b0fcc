//! The hot infer: a served version's `POST .../infer` answered by the front itself, through
//! one execute on a stub (relay.rs); anything the front does not certainly take goes to
//! `thaw serve` as in phase 1, and any outcome but a success is answered by `thaw serve`
//! (`POST /thaw-front/outcome`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::{Bytes, HttpBody};
use hyper::header::{
    HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HOST, SERVER,
    TRANSFER_ENCODING,
};
use hyper::{Body, Method, Request, Response, StatusCode};
use serde_json::{Map, Value};

use crate::accept::{accept, Accepted};
use crate::answer;
use crate::encoding::{compress, pick_encoding, MIN_COMPRESS_BYTES};
use crate::forward::{cause, exchange, forward, refusal};
use crate::registry::{Event, Execute, Registry, Served, ToStub};
use crate::stats::Timings;
use crate::upstream::Upstream;
use crate::wire::{self, InTensor};

/// Bodies past this are forwarded unread.
const MAX_BODY: u64 = 1 << 20;

/// How long a hot request's whole body may take to arrive before it is forwarded instead.
/// (A body of up to 1 MiB on a live connection is in within milliseconds; `thaw serve`'s body
/// deadline then counts from when it starts reading, this much later.)
const BODY_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// A body of the chunks already read, then what is still to come of `body`.
pub fn rest_of(read: Vec<Bytes>, mut body: Body) -> Body {
    let (mut sender, joined) = Body::channel();
    tokio::spawn(async move {
        for chunk in read {
            if sender.send_data(chunk).await.is_err() {
                return;
            }
        }
        while let Some(chunk) = body.data().await {
            match chunk {
                Ok(chunk) => {
                    if sender.send_data(chunk).await.is_err() {
                        return;
                    }
                }
                Err(_) => {
                    sender.abort();
                    return;
                }
            }
        }
    });
    joined
}

/// Whether the front may take `request` (before its body is read).
fn candidate(registry: &Registry, request: &Request<Body>) -> Option<Arc<Served>> {
    if request.method() != Method::POST || request.uri().query().is_some() {
        return None;
    }
    let headers = request.headers();
    if headers.contains_key(CONTENT_ENCODING) || headers.contains_key(TRANSFER_ENCODING) {
        return None;
    }
    let length: u64 = headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()?;
    if length > MAX_BODY {
        return None;
    }
    let served = registry.route(request.uri().path())?;
    registry
        .has_relay(&served.model, &served.version)
        .then_some(served)
}

/// Serve `request`: answered here, or forwarded.
pub async fn serve(
    registry: Arc<Registry>,
    upstream: Upstream,
    request: Request<Body>,
) -> Result<Response<Body>, Infallible> {
    let Some(served) = candidate(&registry, &request) else {
        return forward(upstream, request).await;
    };
    let (parts, mut body) = request.into_parts();
    let mut read = Vec::new();
    let whole = tokio::time::timeout(BODY_WAIT, async {
        while let Some(chunk) = body.data().await {
            read.push(chunk?);
        }
        Ok::<(), hyper::Error>(())
    })
    .await;
    match whole {
        Ok(Ok(())) => {}
        Ok(Err(exc)) => {
            return Ok(refusal(
                StatusCode::BAD_REQUEST,
                &format!("the request body could not be read: {}", cause(&exc)),
            ))
        }
        // A slow (or short) body: `thaw serve` reads the rest under its own body deadline and
        // answers as it does, so the client sees what the Python front would tell it.
        Err(_slow) => {
            return forward(upstream, Request::from_parts(parts, rest_of(read, body))).await;
        }
    }
    let body = Bytes::from(read.concat());
    let start = Instant::now();
    let header_length = parts
        .headers
        .get("inference-header-content-length")
        .map(HeaderValue::as_bytes);
    let taken = accept(&served, &body, header_length);
    let execute = taken
        .as_ref()
        .and_then(|_| registry.begin(&served.model, &served.version));
    let (Some(taken), Some(execute)) = (taken, execute) else {
        return forward(upstream, Request::from_parts(parts, Body::from(body))).await;
    };
    let accept_encoding = parts
        .headers
        .get(ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (outcome, ran) = run(execute, &served, &taken, start).await;
    let (params, tensors) = match outcome {
        Ok(success) => success,
        // The stub died before it ran the request: `thaw serve` runs it, on the next stub.
        Err(outcome) if outcome.not_started() => {
            return forward(upstream, Request::from_parts(parts, Body::from(body))).await;
        }
        Err(outcome) => {
            let request_ns = start.elapsed().as_nanos() as u64;
            let doc = outcome_doc(&served, &ran.instance, &taken, outcome, request_ns);
            return Ok(ask_python(upstream, &served, doc).await);
        }
    };
    let encoded = match answer::encode(served.as_ref(), &taken, &params, &tensors) {
        Ok(encoded) => encoded,
        Err(name) => {
            let mut outcome = Outcome::fail("not_utf8");
            outcome.output = Some(name);
            let request_ns = start.elapsed().as_nanos() as u64;
            let doc = outcome_doc(&served, &ran.instance, &taken, outcome, request_ns);
            return Ok(ask_python(upstream, &served, doc).await);
        }
    };
    let response = http_answer(encoded, accept_encoding.as_deref());
    ran.count_success(&registry, &served, taken.batch_size);
    Ok(response)
}

/// One execute the front sent, answered: its instance and its times.
pub struct Ran {
    pub instance: String,
    start: Instant,
    queued: Duration,
    input: Duration,
    sent_at: Instant,
    answered_at: Instant,
}

impl Ran {
    /// Count the success in the statistics (its output phase ends now).
    pub fn count_success(&self, registry: &Registry, served: &Served, batch_size: u64) {
        let done = Instant::now();
        registry.stats.success(
            &served.model,
            &served.version,
            batch_size,
            Timings {
                request: (done - self.start).as_nanos() as u64,
                queue: self.queued.as_nanos() as u64,
                input: self.input.as_nanos() as u64,
                infer: (self.answered_at - self.sent_at).as_nanos() as u64,
                output: (done - self.answered_at).as_nanos() as u64,
            },
        );
    }
}

/// Send `taken` to a stub as one execute (`_execute_message`'s, for one request) and wait for
/// its answer: the outcome, and the execute's record. `start`: when the request was read.
pub async fn run(
    mut execute: Execute,
    served: &Served,
    taken: &Accepted,
    start: Instant,
) -> (Result<Success, Outcome>, Ran) {
    let queued = start.elapsed();
    let requested: Vec<&str> = taken
        .outputs
        .iter()
        .flatten()
        .map(|(n, _)| n.as_str())
        .collect();
    let fields = wire::ExecuteFields {
        id: execute.id,
        request_id: &taken.id,
        model: &served.model,
        outputs: &requested,
        n: taken.inputs.len(),
    };
    let sent = wire::encode(&fields, &taken.inputs)
        .ok()
        .and_then(|encoded| {
            execute
                .relay
                .to_stub
                .send(ToStub {
                    exec: execute.id,
                    payload: encoded.payload,
                    fds: encoded.fds,
                })
                .ok()
        });
    let sent_at = Instant::now();
    let input = sent_at - start - queued;
    let outcome = match sent {
        None => Err(Outcome::fail("unhealthy")),
        Some(()) => wait(&mut execute.events).await,
    };
    let ran = Ran {
        instance: execute.relay.name.clone(),
        start,
        queued,
        input,
        sent_at,
        answered_at: Instant::now(),
    };
    (outcome, ran)
}

/// The outcome of an execute its stub never started (it ended first).
const NOT_STARTED: &str = "not_started";

/// A non-success, for `thaw serve` to answer.
pub struct Outcome {
    kind: &'static str,
    error: Option<String>,
    code: Option<Value>,
    output: Option<String>,
}

impl Outcome {
    /// The stub ended before it started the execute: the request is `thaw serve`'s to run.
    pub fn not_started(&self) -> bool {
        self.kind == NOT_STARTED
    }

    fn fail(kind: &'static str) -> Outcome {
        Outcome {
            kind,
            error: None,
            code: None,
            output: None,
        }
    }
}

pub type Success = (Value, Vec<InTensor>);

/// A response row and the message's tensors: the success, or the outcome.
fn row_outcome(row: &Value, tensors: Vec<InTensor>) -> Option<Result<Success, Outcome>> {
    if let Some(error) = row.get("error") {
        let mut outcome = Outcome::fail("model_error");
        outcome.error = Some(
            error
                .as_str()
                .map_or_else(|| error.to_string(), String::from),
        );
        outcome.code = row.get("code").cloned();
        return Some(Err(outcome));
    }
    if row.get("none").and_then(Value::as_bool) == Some(true) {
        return Some(Err(Outcome::fail("no_response")));
    }
    if row.get("reschedule").and_then(Value::as_bool) == Some(true) {
        // Released with RESCHEDULE: only an iterative sequence model may be, and none is hot.
        return Some(Err(Outcome::fail("rescheduled")));
    }
    if row.get("sender").and_then(Value::as_bool) == Some(true) {
        return None; // its `send` answers it
    }
    let n = row.get("n").and_then(Value::as_u64).unwrap_or(0) as usize;
    let params = row
        .get("params")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let mut tensors = tensors;
    tensors.truncate(n);
    Some(Ok((params, tensors)))
}

/// The stub's answer to one execute: its `done`, and its sender's `send` when the row says so.
async fn wait(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>,
) -> Result<Success, Outcome> {
    let mut done_sender = false;
    let mut sent: Option<Result<Success, Outcome>> = None;
    loop {
        let message = match events.recv().await {
            Some(Event::Message(message)) => message,
            Some(Event::Unhealthy) | None => return Err(Outcome::fail("unhealthy")),
            Some(Event::NotStarted) => return Err(Outcome::fail(NOT_STARTED)),
        };
        match message.fields.get("op").and_then(Value::as_str) {
            Some("done") => {
                if let Some(error) = message.fields.get("error").filter(|e| !e.is_null()) {
                    let mut outcome = Outcome::fail("execute_failed");
                    outcome.error = Some(
                        error
                            .as_str()
                            .map_or_else(|| error.to_string(), String::from),
                    );
                    return Err(outcome);
                }
                let row = message.fields.get("responses").and_then(|r| r.get(0));
                match row_outcome(row.unwrap_or(&Value::Null), message.tensors) {
                    Some(result) => return result,
                    None => done_sender = true,
                }
            }
            Some("send") if sent.is_none() => {
                let fin = message.fields.get("final").and_then(Value::as_bool) == Some(true);
                match message.fields.get("response").filter(|r| !r.is_null()) {
                    // The sender's response is the answer, at once, whatever the execute says
                    // after (as `thaw serve` and Triton answer it).
                    Some(row) => {
                        if let Some(result) = row_outcome(row, message.tensors) {
                            return result;
                        }
                    }
                    None if fin => sent = Some(Err(Outcome::fail("no_response"))),
                    None => {}
                }
            }
            _ => {}
        }
        if done_sender {
            if let Some(result) = sent.take() {
                return result;
            }
        }
    }
}

/// The 200, compressed when the client accepts it and the body is large enough.
fn http_answer(encoded: answer::Encoded, accept_encoding: Option<&str>) -> Response<Body> {
    let mut body = encoded.body;
    let mut coding = None;
    if let Some(accept) = accept_encoding {
        if body.len() >= MIN_COMPRESS_BYTES {
            coding = pick_encoding(accept);
            if let Some(coding) = coding {
                body = compress(&body, coding);
            }
        }
    }
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    match encoded.header_length {
        None => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        Some(n) => {
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert("inference-header-content-length", HeaderValue::from(n));
        }
    }
    if let Some(coding) = coding {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding));
    }
    headers.insert(SERVER, HeaderValue::from_static("thaw")); // as `thaw serve`'s answers
    response
}

/// The outcome as `thaw serve` reads it (`POST /thaw-front/outcome`).
pub fn outcome_doc(
    served: &Served,
    instance: &str,
    request: &Accepted,
    outcome: Outcome,
    request_ns: u64,
) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert("model".into(), Value::from(served.model.clone()));
    doc.insert("version".into(), Value::from(served.version.clone()));
    doc.insert("instance".into(), Value::from(instance));
    doc.insert("kind".into(), Value::from(outcome.kind));
    if let Some(error) = outcome.error {
        doc.insert("error".into(), Value::from(error));
    }
    if let Some(code) = outcome.code {
        doc.insert("code".into(), code);
    }
    if !request.id.is_empty() {
        doc.insert("id".into(), Value::from(request.id.clone()));
    }
    if let Some(output) = outcome.output {
        doc.insert("output".into(), Value::from(output));
    }
    doc.insert("batch_size".into(), Value::from(request.batch_size));
    doc.insert("request_ns".into(), Value::from(request_ns));
    doc
}

/// `thaw serve`'s answer to an outcome (`POST /thaw-front/outcome`), as it comes.
pub async fn ask_python(
    upstream: Upstream,
    served: &Served,
    doc: Map<String, Value>,
) -> Response<Body> {
    let body = Value::Object(doc).to_string();
    let token = HeaderValue::from_str(&served.token).unwrap_or(HeaderValue::from_static(""));
    let outgoing = Request::builder()
        .method(Method::POST)
        .uri("http://thaw-serve/thaw-front/outcome")
        .header(HOST, "thaw-front")
        .header(CONTENT_TYPE, "application/json")
        .header("x-thaw-front-token", token)
        .body(Body::from(body))
        .expect("a request");
    exchange(upstream, outgoing).await
}
