//! The gRPC port (decision 0032 phase 3): HTTP/2 with prior knowledge, every call forwarded to
//! the Python gRPC server on its private Unix socket (streams both ways, trailers included),
//! except a hot version's `ModelInfer` the front certainly takes (grpc_proto.rs), answered
//! through one execute on a stub as the HTTP hot path does (hot.rs). Any outcome but a success
//! is `thaw serve`'s to word: the front asks it (`POST /thaw-front/outcome` with
//! `"surface": "grpc"`) for the status code and message its gRPC surface would give.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use hyper::body::{Bytes, HttpBody, SizeHint};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Body, Client, Method, Request, Response, Uri};
use prost::Message;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::forward::cause;
use crate::grpc_proto::{self, ModelInferRequest, MAX_MESSAGE};
use crate::hot::{ask_python, outcome_doc, run, Outcome};
use crate::registry::Registry;
use crate::upstream::{UnixConnector, Upstream};

/// The client to the Python gRPC server: HTTP/2 (prior knowledge) on its Unix socket, one
/// connection for every call, the clients' streams passed through as they come.
pub type GrpcUpstream = Client<UnixConnector, CallBody>;

pub fn grpc_client(path: PathBuf) -> GrpcUpstream {
    Client::builder()
        .pool_idle_timeout(Duration::from_secs(20))
        .http2_only(true)
        .http2_adaptive_window(true)
        .set_host(false)
        .build(UnixConnector::new(path))
}

/// A client's call body: the chunks already read, then the rest of its stream (trailers too).
pub struct CallBody {
    read: VecDeque<Bytes>,
    rest: Option<RecvStream>,
}

impl HttpBody for CallBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_data(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, h2::Error>>> {
        let me = self.get_mut();
        if let Some(chunk) = me.read.pop_front() {
            return Poll::Ready(Some(Ok(chunk)));
        }
        let Some(rest) = me.rest.as_mut() else {
            return Poll::Ready(None);
        };
        match rest.poll_data(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let _ = rest.flow_control().release_capacity(chunk.len());
                Poll::Ready(Some(Ok(chunk)))
            }
            other => other,
        }
    }

    fn poll_trailers(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<HeaderMap>, h2::Error>> {
        match self.get_mut().rest.as_mut() {
            Some(rest) => rest.poll_trailers(cx),
            None => Poll::Ready(Ok(None)),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.as_ref().is_none_or(RecvStream::is_end_stream)
    }
}

const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// How long a hot call's message may take to arrive before the call is forwarded instead.
const BODY_WAIT: Duration = Duration::from_millis(100);

/// The most calls at once on one client connection, as the Python gRPC server allows.
const MAX_STREAMS: u32 = 1024;

/// gRPC's status codes the front answers by itself.
const DEADLINE_EXCEEDED: u32 = 4;
const INTERNAL: u32 = 13;
const RESOURCE_EXHAUSTED: u32 = 8;
const UNAVAILABLE: u32 = 14;

/// What every gRPC connection shares.
pub struct GrpcFront {
    pub registry: Option<Arc<Registry>>,
    /// `thaw serve`'s HTTP socket (the outcomes).
    pub http: Upstream,
    /// The Python gRPC server's socket.
    pub grpc: GrpcUpstream,
    /// The HTTP/2 handshake's deadline (`--head-timeout-s`, as grpcio's
    /// `grpc.server_handshake_timeout_ms`): a connection that does not finish it is closed.
    pub handshake: Option<Duration>,
    /// The most calls in flight at once on the port (0: no cap), as the Python gRPC server's
    /// `maximum_concurrent_rpcs` (`--max-connections`): past it a call is RESOURCE_EXHAUSTED.
    pub max_calls: usize,
    pub calls: std::sync::atomic::AtomicUsize,
}

/// One call counted in flight until dropped.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A call's answer: forwarded as it comes, or the front's own (one message, then trailers).
pub enum GrpcBody {
    Forwarded(Body),
    Unary {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
}

impl HttpBody for GrpcBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_data(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, hyper::Error>>> {
        match self.get_mut() {
            GrpcBody::Forwarded(body) => Pin::new(body).poll_data(cx),
            GrpcBody::Unary { data, .. } => Poll::Ready(data.take().map(Ok)),
        }
    }

    fn poll_trailers(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<HeaderMap>, hyper::Error>> {
        match self.get_mut() {
            GrpcBody::Forwarded(body) => Pin::new(body).poll_trailers(cx),
            GrpcBody::Unary { trailers, .. } => Poll::Ready(Ok(trailers.take())),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GrpcBody::Forwarded(body) => body.is_end_stream(),
            GrpcBody::Unary { data, trailers } => data.is_none() && trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GrpcBody::Forwarded(body) => body.size_hint(),
            // No exact size: hyper would add a Content-Length grpcio does not send.
            GrpcBody::Unary { .. } => SizeHint::default(),
        }
    }
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%`.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn status_headers(headers: &mut HeaderMap, code: u32, message: &str) {
    headers.insert("grpc-status", HeaderValue::from(code));
    if !message.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&percent_encode(message)) {
            headers.insert("grpc-message", value);
        }
    }
}

/// A call ended with `code` and `message` and no message: a trailers-only answer.
pub fn status_only(code: u32, message: &str) -> Response<GrpcBody> {
    let mut response = Response::new(GrpcBody::Unary {
        data: None,
        trailers: None,
    });
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    status_headers(headers, code, message);
    response
}

/// A call answered with one message and status OK, as grpcio answers a unary call.
fn unary(message: Vec<u8>) -> Response<GrpcBody> {
    let mut trailers = HeaderMap::new();
    status_headers(&mut trailers, 0, "");
    let mut response = Response::new(GrpcBody::Unary {
        data: Some(Bytes::from(message)),
        trailers: Some(trailers),
    });
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(
        "grpc-accept-encoding",
        HeaderValue::from_static("identity, deflate, gzip"),
    );
    response
}

/// Accept gRPC connections until the drain starts; each is then sent GOAWAY, its calls in
/// flight answered.
pub async fn listen(
    front: Arc<GrpcFront>,
    listener: TcpListener,
    mut draining: watch::Receiver<Option<Duration>>,
) {
    loop {
        if draining.borrow().is_some() {
            return;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => {
                    tokio::spawn(connection(front.clone(), socket, draining.clone()));
                }
                Err(exc) => eprintln!("thaw-front: gRPC accept failed: {exc}"),
            },
            changed = draining.changed() => if changed.is_err() { return },
        }
    }
}

/// One client connection, on h2 itself: hyper's server would add a `date` header to every
/// answer, which grpcio does not send and its clients see as metadata.
async fn connection(
    front: Arc<GrpcFront>,
    socket: TcpStream,
    mut draining: watch::Receiver<Option<Duration>>,
) {
    let _ = socket.set_nodelay(true);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24);
    let handshake = builder.handshake::<_, Bytes>(socket);
    let shaken = match front.handshake {
        Some(limit) => match tokio::time::timeout(limit, handshake).await {
            Ok(shaken) => shaken,
            Err(_) => return, // the socket is dropped: closed
        },
        None => handshake.await,
    };
    let Ok(mut connection) = shaken else {
        return;
    };
    let mut closing = false;
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    tokio::spawn(call(front.clone(), request, respond));
                }
                _ => return,
            },
            changed = draining.changed(), if !closing => {
                if changed.is_err() || draining.borrow().is_some() {
                    connection.graceful_shutdown();
                    closing = true;
                }
            },
        }
    }
}

async fn call(
    front: Arc<GrpcFront>,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    let request = request.map(|stream| CallBody {
        read: VecDeque::new(),
        rest: Some(stream),
    });
    let calls = front
        .calls
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let in_flight = InFlight(&front.calls);
    if front.max_calls > 0 && calls >= front.max_calls {
        let refusal = status_only(RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!");
        drop(in_flight);
        send(respond, refusal).await;
        return;
    }
    // A call the client cancels is dropped here: a forwarded one is then reset upstream too,
    // so the Python server sees the cancellation.
    let response = tokio::select! {
        response = serve(front.clone(), request) => response,
        _ = poll_fn(|cx| respond.poll_reset(cx)) => return,
    };
    send(respond, response).await;
    drop(in_flight);
}

/// Write `response` on the call's stream: its head, its body as the peer's window allows,
/// its trailers; given up when the client resets the call.
async fn send(mut respond: SendResponse<Bytes>, response: Response<GrpcBody>) {
    let (parts, mut body) = response.into_parts();
    let end = body.is_end_stream();
    let Ok(mut stream) = respond.send_response(Response::from_parts(parts, ()), end) else {
        return;
    };
    if end {
        return;
    }
    loop {
        let next = tokio::select! {
            next = body.data() => next,
            _ = poll_fn(|cx| stream.poll_reset(cx)) => return,
        };
        match next {
            Some(Ok(chunk)) => {
                if write(&mut stream, chunk).await.is_err() {
                    return;
                }
            }
            Some(Err(_)) => {
                stream.send_reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
            None => break,
        }
    }
    match body.trailers().await {
        Ok(Some(trailers)) => {
            let _ = stream.send_trailers(trailers);
        }
        Ok(None) => {
            let _ = stream.send_data(Bytes::new(), true);
        }
        Err(_) => stream.send_reset(h2::Reason::INTERNAL_ERROR),
    }
}

/// `chunk` on `stream`, as the flow-control window opens.
async fn write(stream: &mut SendStream<Bytes>, mut chunk: Bytes) -> Result<(), ()> {
    while !chunk.is_empty() {
        stream.reserve_capacity(chunk.len());
        let capacity = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            _ => return Err(()),
        };
        if capacity == 0 {
            continue;
        }
        let part = chunk.split_to(capacity.min(chunk.len()));
        stream.send_data(part, false).map_err(|_| ())?;
    }
    Ok(())
}

/// Whether a call may be a hot `ModelInfer` (before its message is read).
fn candidate(request: &Request<CallBody>) -> bool {
    if request.method() != Method::POST || request.uri().path() != MODEL_INFER {
        return false;
    }
    let headers = request.headers();
    let grpc_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t == "application/grpc" || t == "application/grpc+proto");
    let identity = headers
        .get("grpc-encoding")
        .is_none_or(|v| v.as_bytes() == b"identity");
    let timeout_ok = headers
        .get("grpc-timeout")
        .is_none_or(|v| grpc_timeout(v.as_bytes()).is_some());
    grpc_type && identity && timeout_ok
}

/// A `grpc-timeout` value (1 to 8 digits and a unit).
fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

async fn serve(front: Arc<GrpcFront>, request: Request<CallBody>) -> Response<GrpcBody> {
    if let Some(registry) = &front.registry {
        if candidate(&request) {
            return hot(&front, registry, request).await;
        }
    }
    forward(&front.grpc, request).await
}

/// `request`, sent to the Python gRPC server; its answer as it comes.
async fn forward(client: &GrpcUpstream, request: Request<CallBody>) -> Response<GrpcBody> {
    let (mut parts, body) = request.into_parts();
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = match format!("http://thaw-grpc{target}").parse::<Uri>() {
        Ok(uri) => uri,
        Err(_) => return status_only(INTERNAL, "the call's path is not a path"),
    };
    match client.request(Request::from_parts(parts, body)).await {
        Ok(answer) => answer.map(GrpcBody::Forwarded),
        Err(exc) => status_only(
            UNAVAILABLE,
            &format!(
                "the server behind the native front did not answer: {}",
                cause(&exc)
            ),
        ),
    }
}

/// A `ModelInfer` answered here when it certainly qualifies, else forwarded.
async fn hot(
    front: &GrpcFront,
    registry: &Arc<Registry>,
    request: Request<CallBody>,
) -> Response<GrpcBody> {
    let received = Instant::now();
    let deadline = request
        .headers()
        .get("grpc-timeout")
        .and_then(|v| grpc_timeout(v.as_bytes()));
    let (parts, mut body) = request.into_parts();
    let mut read: Vec<Bytes> = Vec::new();
    let mut size = 0usize;
    let whole = tokio::time::timeout(BODY_WAIT, async {
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            size += chunk.len();
            read.push(chunk);
            if size > 5 + MAX_MESSAGE {
                return Ok(false);
            }
        }
        Ok::<bool, h2::Error>(true)
    })
    .await;
    match whole {
        Ok(Ok(true)) => {}
        // The client's stream broke off: nothing to answer.
        Ok(Err(exc)) => {
            return status_only(INTERNAL, &format!("the call broke off: {}", cause(&exc)))
        }
        // Too large, or slow: the Python server reads the rest and answers as it does.
        Ok(Ok(false)) | Err(_) => {
            body.read.extend(read);
            return forward(&front.grpc, Request::from_parts(parts, body)).await;
        }
    }
    let bytes = Bytes::from(read.concat());
    let start = Instant::now();
    let taken = grpc_proto::unframe(&bytes)
        .and_then(|message| ModelInferRequest::decode(message).ok())
        .and_then(|message| {
            let served = registry.route_model(&message.model_name, &message.model_version)?;
            if !registry.has_relay(&served.model, &served.version) {
                return None;
            }
            let taken = grpc_proto::accept(&served, message)?;
            let execute = registry.begin(&served.model, &served.version)?;
            Some((served, taken, execute))
        });
    let Some((served, taken, execute)) = taken else {
        let whole = CallBody {
            read: VecDeque::from([bytes]),
            rest: None,
        };
        return forward(&front.grpc, Request::from_parts(parts, whole)).await;
    };
    let execution = run(execute, &served, &taken, start);
    let (outcome, ran) = match deadline {
        None => execution.await,
        Some(deadline) => {
            let left = deadline.saturating_sub(received.elapsed());
            match tokio::time::timeout(left, execution).await {
                Ok(ran) => ran,
                Err(_) => return status_only(DEADLINE_EXCEEDED, "Deadline Exceeded"),
            }
        }
    };
    let (params, tensors) = match outcome {
        Ok(success) => success,
        // The stub died before it ran the call: the Python server runs it, on the next stub.
        Err(outcome) if outcome.not_started() => {
            let whole = CallBody {
                read: VecDeque::from([bytes]),
                rest: None,
            };
            return forward(&front.grpc, Request::from_parts(parts, whole)).await;
        }
        Err(outcome) => {
            let request_ns = start.elapsed().as_nanos() as u64;
            return ask_grpc_status(front, &served, &ran.instance, &taken, outcome, request_ns)
                .await;
        }
    };
    let answer = grpc_proto::encode(&served, &taken, &params, tensors);
    let response = unary(grpc_proto::frame(&answer));
    ran.count_success(registry, &served, taken.batch_size);
    response
}

/// The status `thaw serve`'s gRPC surface gives `outcome` (it counts it too).
async fn ask_grpc_status(
    front: &GrpcFront,
    served: &crate::registry::Served,
    instance: &str,
    taken: &crate::accept::Accepted,
    outcome: Outcome,
    request_ns: u64,
) -> Response<GrpcBody> {
    let mut doc = outcome_doc(served, instance, taken, outcome, request_ns);
    doc.insert("surface".into(), Value::from("grpc"));
    let answer = ask_python(front.http.clone(), served, doc).await;
    let ok = answer.status().is_success();
    let body = hyper::body::to_bytes(answer.into_body()).await.ok();
    let doc: Option<Value> = body.and_then(|b| serde_json::from_slice(&b).ok());
    match doc {
        Some(doc) if ok => {
            let code = doc
                .get("code")
                .and_then(Value::as_u64)
                .unwrap_or(INTERNAL as u64);
            let message = doc.get("message").and_then(Value::as_str).unwrap_or("");
            status_only(code as u32, message)
        }
        _ => status_only(
            INTERNAL,
            "the server behind the native front did not word the error",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_grpc_timeouts() {
        assert_eq!(grpc_timeout(b"30S"), Some(Duration::from_secs(30)));
        assert_eq!(grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout(b"123456789S"), None);
        assert_eq!(grpc_timeout(b"S"), None);
        assert_eq!(grpc_timeout(b"5x"), None);
    }

    #[test]
    fn percent_encodes_messages() {
        assert_eq!(percent_encode("plain text: ok"), "plain text: ok");
        assert_eq!(percent_encode("50% é\n"), "50%25 %C3%A9%0A");
    }

    #[test]
    fn answers_trailers_only_and_unary() {
        let answer = status_only(3, "bad");
        assert_eq!(answer.headers()["grpc-status"], "3");
        assert_eq!(answer.headers()["grpc-message"], "bad");
        assert!(answer.body().is_end_stream());
        let answer = unary(vec![0, 0, 0, 0, 0]);
        assert!(!answer.headers().contains_key("grpc-status"));
        assert_eq!(answer.headers()[CONTENT_TYPE], "application/grpc");
    }
}
