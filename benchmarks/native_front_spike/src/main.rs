//! A measurement spike for decision 0025, not a server to deploy: how much CPU per request a
//! native front costs when it hands each request to Thaw's own Python stub process
//! (runtime/python/stub/stub_main.py, unchanged) over the stub's own wire
//! (runtime/python/stub/wire.py: one SOCK_SEQPACKET datagram per message, `I` ‖ u32 LE length
//! ‖ JSON [fields, tensor table] ‖ inline tensor bytes).
//!
//! It serves one Python model whose inputs and outputs are numeric tensors: over HTTP/1.1
//! (`POST /v2/models/<model>/infer` with JSON tensors or Triton's binary tensor extension,
//! `GET /v2/health/ready|live`, `GET /v2/models/<model>/ready`) and, given GRPC_PORT, over gRPC
//! (`ModelInfer` with `raw_input_contents`). One execute in flight at a time (one instance, no
//! batching). No statistics, tracing, parameters, validation against the model's config, or
//! any other route: it measures the floor of decision 0025's design (benchmarks/peers.py
//! `NativeSpikePeer`; benchmarks/stub_wakeups.py and serve_throughput.py, `native_spike`).
//!
//!     thaw-native-front-spike PORT INIT_JSON PYTHON [GRPC_PORT]
//!
//! INIT_JSON holds the stub's `init` fields ({model_file, decoupled, args}) and the model's
//! name; PYTHON starts the stub (`PYTHON -m runtime.python.stub.stub_main FD`, with the
//! current directory on PYTHONPATH).

mod grpc;
mod stub;
mod tensors;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::{make_service_fn, service_fn};
use hyper::{Body, Method, Request, Response, Server, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::stub::{bad, Stub};
use crate::tensors::{decode_data, encode_data, item_size, Tensor};

pub struct App {
    pub model: String,
    pub stub: Mutex<Stub>,
}

impl App {
    /// One request's inputs through the stub: its outputs, or the error to answer.
    pub async fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        self.stub.lock().await.execute(&self.model, inputs).await
    }
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

fn wants_binary(doc: &Value, name: &str) -> bool {
    let everything = doc["parameters"]["binary_data_output"].as_bool() == Some(true);
    let requested = doc["outputs"]
        .as_array()
        .and_then(|outputs| outputs.iter().find(|o| o["name"].as_str() == Some(name)));
    match requested {
        Some(output) => output["parameters"]["binary_data"]
            .as_bool()
            .unwrap_or(everything),
        None => everything,
    }
}

/// The request's JSON header and, after it, its binary tensors (Triton's binary extension).
fn read_inputs(doc: &Value, mut blobs: &[u8]) -> Result<Vec<Tensor>, String> {
    let inputs = doc["inputs"]
        .as_array()
        .ok_or("the request has no inputs")?;
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        let name = input["name"].as_str().unwrap_or("").to_string();
        let datatype = input["datatype"].as_str().unwrap_or("").to_string();
        let shape: Vec<i64> = input["shape"]
            .as_array()
            .ok_or_else(|| format!("input '{name}' has no shape"))?
            .iter()
            .filter_map(Value::as_i64)
            .collect();
        let count = shape.iter().product::<i64>().max(0) as usize;
        let raw = match input["parameters"]["binary_data_size"].as_u64() {
            Some(size) => {
                let size = size as usize;
                if size > blobs.len() || size != count * item_size(&datatype).unwrap_or(0) {
                    return Err(format!("input '{name}': {size} binary bytes do not fit"));
                }
                let (raw, rest) = blobs.split_at(size);
                blobs = rest;
                raw.to_vec()
            }
            None => encode_data(&datatype, &input["data"], count)
                .map_err(|why| format!("input '{name}': {why}"))?,
        };
        out.push(Tensor {
            name,
            datatype,
            shape,
            raw,
        });
    }
    Ok(out)
}

async fn infer(app: &App, request: Request<Body>) -> Response<Body> {
    let header_length = request
        .headers()
        .get("inference-header-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let body = match hyper::body::to_bytes(request.into_body()).await {
        Ok(body) => body,
        Err(exc) => return refuse(StatusCode::BAD_REQUEST, format!("body: {exc}")),
    };
    let (json_part, blobs) = match header_length {
        Some(n) if n <= body.len() => body.split_at(n),
        Some(_) => return refuse(StatusCode::BAD_REQUEST, "header length past the body"),
        None => (&body[..], &[][..]),
    };
    let doc: Value = match serde_json::from_slice(json_part) {
        Ok(doc) => doc,
        Err(exc) => return refuse(StatusCode::BAD_REQUEST, format!("request JSON: {exc}")),
    };
    let inputs = match read_inputs(&doc, blobs) {
        Ok(inputs) => inputs,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    let outputs = match app.execute(&inputs).await {
        Ok(outputs) => outputs,
        Err(why) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, why),
    };
    let mut described = Vec::with_capacity(outputs.len());
    let mut binary = Vec::new();
    for output in &outputs {
        let mut entry =
            json!({"name": output.name, "datatype": output.datatype, "shape": output.shape});
        if wants_binary(&doc, &output.name) {
            entry["parameters"] = json!({"binary_data_size": output.raw.len()});
            binary.extend_from_slice(&output.raw);
        } else {
            match decode_data(&output.datatype, &output.raw) {
                Ok(data) => entry["data"] = Value::Array(data),
                Err(why) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, why),
            }
        }
        described.push(entry);
    }
    let header = json!({"model_name": app.model, "model_version": "1", "outputs": described});
    if binary.is_empty() {
        return answer(StatusCode::OK, header);
    }
    let mut bytes = serde_json::to_vec(&header).expect("JSON of values");
    let length = bytes.len();
    bytes.extend_from_slice(&binary);
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/octet-stream")
        .header("inference-header-content-length", length.to_string())
        .body(Body::from(bytes))
        .expect("a response")
}

async fn route(app: Arc<App>, request: Request<Body>) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let infer_path = format!("/v2/models/{}/infer", app.model);
    let ready_path = format!("/v2/models/{}/ready", app.model);
    Ok(match (request.method(), path.as_str()) {
        (&Method::POST, p) if p == infer_path => infer(&app, request).await,
        (&Method::GET, "/v2/health/ready") | (&Method::GET, "/v2/health/live") => {
            answer(StatusCode::OK, json!({}))
        }
        (&Method::GET, p) if p == ready_path => answer(StatusCode::OK, json!({})),
        _ => refuse(StatusCode::NOT_FOUND, "not served by this spike"),
    })
}

fn port(text: &str) -> io::Result<u16> {
    text.parse().map_err(|_| bad("not a port number"))
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if !(4..=5).contains(&args.len()) {
        eprintln!("usage: thaw-native-front-spike PORT INIT_JSON PYTHON [GRPC_PORT]");
        std::process::exit(2);
    }
    let http_port = port(&args[1])?;
    let grpc_port = args.get(4).map(|p| port(p)).transpose()?;
    let init: Value = serde_json::from_slice(&std::fs::read(&args[2])?)?;
    let model = init["model"]
        .as_str()
        .ok_or_else(|| bad("INIT_JSON names no model"))?;
    let model = model.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (mut child, stub) = Stub::start(&args[3], &init)?;
        let app = Arc::new(App { model, stub: Mutex::new(stub) });
        if let Some(grpc_port) = grpc_port {
            let listener =
                tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], grpc_port))).await?;
            tokio::spawn(grpc::serve(app.clone(), listener));
        }
        let make = make_service_fn(move |_conn| {
            let app = app.clone();
            async move {
                Ok::<_, Infallible>(service_fn(move |request| route(app.clone(), request)))
            }
        });
        let addr = SocketAddr::from(([127, 0, 0, 1], http_port));
        let served = Server::bind(&addr).http1_only(true).serve(make).await;
        let _ = child.kill();
        served.map_err(io::Error::other)
    })
}
