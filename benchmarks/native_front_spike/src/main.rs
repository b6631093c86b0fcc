//! A measurement spike for decision 0025, not a server to deploy: how much CPU per request a
//! native HTTP front costs when it hands each request to Thaw's own Python stub process
//! (runtime/python/stub/stub_main.py, unchanged) over the stub's own wire
//! (runtime/python/stub/wire.py: one SOCK_SEQPACKET datagram per message, `I` ‖ u32 LE length
//! ‖ JSON [fields, tensor table] ‖ inline tensor bytes).
//!
//! It serves one Python model whose inputs and outputs are numeric tensors, over HTTP/1.1
//! with JSON bodies (`POST /v2/models/<model>/infer`, `GET /v2/health/ready`,
//! `GET /v2/models/<model>/ready`), one execute in flight at a time (one instance, no
//! batching). No statistics, tracing, parameters, binary tensors, or any other route: it
//! measures the floor of decision 0025's design (benchmarks/stub_wakeups.py, mode
//! `native_spike`).
//!
//!     thaw-native-front-spike PORT INIT_JSON PYTHON
//!
//! INIT_JSON holds the stub's `init` fields ({model_file, decoupled, args}) and the model's
//! name; PYTHON starts the stub (`PYTHON -m runtime.python.stub.stub_main FD`, with the
//! current directory on PYTHONPATH).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::os::unix::io::{AsRawFd, RawFd};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use hyper::service::{make_service_fn, service_fn};
use hyper::{Body, Method, Request, Response, Server, StatusCode};
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};
use serde_json::{json, Value};
use tokio::io::unix::AsyncFd;
use tokio::sync::Mutex;

const MESSAGE_MAX_BYTES: usize = 160 * 1024; // wire.MESSAGE_MAX_BYTES

struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The server's end of the stub's socket: one execute in flight (the Mutex around it).
struct Stub {
    sock: AsyncFd<Fd>,
    next_id: u64,
    buffer: Vec<u8>,
}

impl Stub {
    async fn send(&self, payload: &[u8]) -> io::Result<()> {
        loop {
            let mut guard = self.sock.writable().await?;
            match guard.try_io(|fd| {
                send(fd.get_ref().0, payload, MsgFlags::empty()).map_err(io::Error::from)
            }) {
                Ok(result) => return result.map(|_| ()),
                Err(_would_block) => continue,
            }
        }
    }

    async fn receive(&mut self) -> io::Result<usize> {
        loop {
            let mut guard = self.sock.readable().await?;
            let buffer = &mut self.buffer;
            match guard.try_io(|fd| {
                recv(fd.get_ref().0, buffer, MsgFlags::empty()).map_err(io::Error::from)
            }) {
                Ok(Ok(0)) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stub gone")),
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// One message of the stub: its fields, its tensor table and where its inline bytes start.
    async fn next_message(&mut self) -> io::Result<(Value, Vec<Value>, Vec<u8>)> {
        let size = self.receive().await?;
        let payload = &self.buffer[..size];
        if size < 5 || payload[0] != b'I' {
            return Err(bad("the stub sent a message this spike does not read"));
        }
        let length = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]) as usize;
        if 5 + length > size {
            return Err(bad("the stub's header runs past its message"));
        }
        let header: Value = serde_json::from_slice(&payload[5..5 + length])?;
        let (fields, table) = match header {
            Value::Array(mut parts) if parts.len() == 2 => {
                let table = parts.pop().unwrap();
                (parts.pop().unwrap(), table)
            }
            _ => return Err(bad("the stub's header is not [fields, table]")),
        };
        let table = match table {
            Value::Array(entries) => entries,
            _ => return Err(bad("the stub's tensor table is not a list")),
        };
        Ok((fields, table, payload[5 + length..].to_vec()))
    }
}

fn bad(text: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, text.to_string())
}

/// A message on the stub's wire: `I` ‖ u32 LE length ‖ JSON [fields, table] ‖ inline bytes.
fn wire_message(fields: &Value, table: &[Value], inline: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(&json!([fields, table])).expect("JSON of values");
    let mut out = Vec::with_capacity(5 + header.len() + inline.len());
    out.push(b'I');
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(inline);
    out
}

fn item_size(datatype: &str) -> Option<usize> {
    match datatype {
        "FP32" | "INT32" | "UINT32" => Some(4),
        "FP64" | "INT64" | "UINT64" => Some(8),
        _ => None,
    }
}

fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| flatten(item, out)),
        other => out.push(other),
    }
}

/// A JSON input's `data` as little-endian bytes of its datatype.
fn encode_data(datatype: &str, data: &Value, count: usize) -> Result<Vec<u8>, String> {
    let mut leaves = Vec::with_capacity(count);
    flatten(data, &mut leaves);
    if leaves.len() != count {
        return Err(format!(
            "{} values where the shape holds {}",
            leaves.len(),
            count
        ));
    }
    let size = item_size(datatype).ok_or_else(|| format!("datatype {datatype} not served"))?;
    let mut out = Vec::with_capacity(count * size);
    for leaf in leaves {
        let number = leaf.as_f64().ok_or("a value that is not a number")?;
        match datatype {
            "FP32" => out.extend_from_slice(&(number as f32).to_le_bytes()),
            "FP64" => out.extend_from_slice(&number.to_le_bytes()),
            "INT32" => out.extend_from_slice(&(number as i32).to_le_bytes()),
            "UINT32" => out.extend_from_slice(&(number as u32).to_le_bytes()),
            "INT64" => out.extend_from_slice(&(number as i64).to_le_bytes()),
            _ => out.extend_from_slice(&(number as u64).to_le_bytes()),
        }
    }
    Ok(out)
}

/// Output bytes as JSON numbers of their datatype.
fn decode_data(datatype: &str, raw: &[u8]) -> Result<Vec<Value>, String> {
    let size = item_size(datatype).ok_or_else(|| format!("output datatype {datatype}"))?;
    Ok(raw
        .chunks_exact(size)
        .map(|c| match datatype {
            "FP32" => json!(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            "INT32" => json!(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            "UINT32" => json!(u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            "FP64" => json!(f64::from_le_bytes(c.try_into().unwrap())),
            "INT64" => json!(i64::from_le_bytes(c.try_into().unwrap())),
            _ => json!(u64::from_le_bytes(c.try_into().unwrap())),
        })
        .collect())
}

struct App {
    model: String,
    stub: Mutex<Stub>,
}

fn answer(status: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(
            serde_json::to_vec(&body).expect("JSON of values"),
        ))
        .expect("a response")
}

fn refuse(status: StatusCode, text: impl Into<String>) -> Response<Body> {
    answer(status, json!({ "error": text.into() }))
}

async fn infer(app: &App, body: &[u8]) -> Response<Body> {
    let doc: Value = match serde_json::from_slice(body) {
        Ok(doc) => doc,
        Err(exc) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("failed to parse the request JSON: {exc}"),
            )
        }
    };
    let inputs = match doc.get("inputs").and_then(Value::as_array) {
        Some(inputs) => inputs,
        None => return refuse(StatusCode::BAD_REQUEST, "the request has no inputs"),
    };
    let mut table = Vec::with_capacity(inputs.len());
    let mut inline = Vec::new();
    for input in inputs {
        let name = input.get("name").and_then(Value::as_str).unwrap_or("");
        let datatype = input.get("datatype").and_then(Value::as_str).unwrap_or("");
        let shape: Vec<u64> = match input.get("shape").and_then(Value::as_array) {
            Some(dims) => dims.iter().filter_map(Value::as_u64).collect(),
            None => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    format!("input '{name}' has no shape"),
                )
            }
        };
        let count = shape.iter().product::<u64>() as usize;
        let raw = match encode_data(datatype, input.get("data").unwrap_or(&Value::Null), count) {
            Ok(raw) => raw,
            Err(why) => return refuse(StatusCode::BAD_REQUEST, format!("input '{name}': {why}")),
        };
        table.push(json!([name, datatype, shape, 0, inline.len(), raw.len()]));
        inline.extend_from_slice(&raw);
    }
    let mut stub = app.stub.lock().await;
    stub.next_id += 1;
    let exec_id = stub.next_id;
    let fields = json!({
        "op": "execute", "id": exec_id,
        "requests": [{"id": "", "model": app.model, "params": {}, "outputs": [],
                      "correlation_id": 0, "flags": 0, "n": inputs.len()}],
    });
    if let Err(exc) = stub.send(&wire_message(&fields, &table, &inline)).await {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("stub: {exc}"));
    }
    loop {
        let (fields, table, inline) = match stub.next_message().await {
            Ok(message) => message,
            Err(exc) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("stub: {exc}")),
        };
        if fields.get("op").and_then(Value::as_str) != Some("done") {
            continue; // a log line or another message of the stub's: not this spike's concern
        }
        if let Some(error) = fields.get("error").and_then(Value::as_str) {
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, error);
        }
        let mut outputs = Vec::with_capacity(table.len());
        for entry in &table {
            let (name, datatype, shape) = (&entry[0], entry[1].as_str().unwrap_or(""), &entry[2]);
            let (at, nbytes) = (
                entry[4].as_u64().unwrap_or(0) as usize,
                entry[5].as_u64().unwrap_or(0) as usize,
            );
            if entry[3].as_u64() != Some(0) || at + nbytes > inline.len() {
                return refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "an output this spike does not read",
                );
            }
            match decode_data(datatype, &inline[at..at + nbytes]) {
                Ok(data) => outputs.push(
                    json!({"name": name, "datatype": datatype, "shape": shape, "data": data}),
                ),
                Err(why) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, why),
            }
        }
        drop(stub);
        return answer(
            StatusCode::OK,
            json!({"model_name": app.model, "model_version": "1", "outputs": outputs}),
        );
    }
}

async fn route(app: Arc<App>, request: Request<Body>) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let infer_path = format!("/v2/models/{}/infer", app.model);
    let ready_path = format!("/v2/models/{}/ready", app.model);
    Ok(match (request.method(), path.as_str()) {
        (&Method::POST, p) if p == infer_path => {
            match hyper::body::to_bytes(request.into_body()).await {
                Ok(body) => infer(&app, &body).await,
                Err(exc) => refuse(StatusCode::BAD_REQUEST, format!("body: {exc}")),
            }
        }
        (&Method::GET, "/v2/health/ready") | (&Method::GET, "/v2/health/live") => {
            answer(StatusCode::OK, json!({}))
        }
        (&Method::GET, p) if p == ready_path => answer(StatusCode::OK, json!({})),
        _ => refuse(StatusCode::NOT_FOUND, "not served by this spike"),
    })
}

fn start_stub(python: &str, init: &Value) -> io::Result<(Child, Stub)> {
    let (server_end, stub_end) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::empty(),
    )
    .map_err(io::Error::from)?;
    fcntl(server_end, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(io::Error::from)?;
    let cwd = std::env::current_dir()?;
    let pythonpath = match std::env::var("PYTHONPATH") {
        Ok(rest) if !rest.is_empty() => format!("{}:{}", cwd.display(), rest),
        _ => cwd.display().to_string(),
    };
    let child = Command::new(python)
        .args(["-m", "runtime.python.stub.stub_main", &stub_end.to_string()])
        .env("PYTHONPATH", pythonpath)
        .stdin(Stdio::null())
        .spawn()?;
    nix::unistd::close(stub_end).map_err(io::Error::from)?;
    // The init exchange is blocking, before the loop serves anything.
    let fields = json!({"op": "init", "model_file": init["model_file"],
                        "decoupled": init["decoupled"], "args": init["args"]});
    send(
        server_end,
        &wire_message(&fields, &[], &[]),
        MsgFlags::empty(),
    )
    .map_err(io::Error::from)?;
    let mut buffer = vec![0u8; MESSAGE_MAX_BYTES];
    loop {
        let size = recv(server_end, &mut buffer, MsgFlags::empty()).map_err(io::Error::from)?;
        if size == 0 {
            return Err(bad("the stub exited before it was ready"));
        }
        let length = u32::from_le_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize;
        let header: Value = serde_json::from_slice(&buffer[5..5 + length])?;
        match header[0]["op"].as_str() {
            Some("ready") => break,
            Some("failed") => {
                return Err(bad(&format!(
                    "the model's init failed: {}",
                    header[0]["error"]
                )))
            }
            _ => continue,
        }
    }
    fcntl(server_end, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
    let stub = Stub {
        sock: AsyncFd::new(Fd(server_end))?,
        next_id: 0,
        buffer,
    };
    Ok((child, stub))
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: thaw-native-front-spike PORT INIT_JSON PYTHON");
        std::process::exit(2);
    }
    let port: u16 = args[1]
        .parse()
        .map_err(|_| bad("PORT is not a port number"))?;
    let init: Value = serde_json::from_slice(&std::fs::read(&args[2])?)?;
    let model = init["model"]
        .as_str()
        .ok_or_else(|| bad("INIT_JSON names no model"))?
        .to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (mut child, stub) = start_stub(&args[3], &init)?;
        let app = Arc::new(App { model, stub: Mutex::new(stub) });
        let make = make_service_fn(move |_conn| {
            let app = app.clone();
            async move { Ok::<_, Infallible>(service_fn(move |request| route(app.clone(), request))) }
        });
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let served = Server::bind(&addr).http1_only(true).serve(make).await;
        let _ = child.kill();
        served.map_err(io::Error::other)
    })
}
