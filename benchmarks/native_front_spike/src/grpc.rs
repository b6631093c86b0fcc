//! `inference.GRPCInferenceService/ModelInfer` over HTTP/2 (h2), the messages by prost: the
//! fields of KServe v2's grpc_service.proto the spike reads and writes, with their numbers.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use h2::server::SendResponse;
use http::{HeaderMap, HeaderValue, Request, Response};
use prost::Message;
use tokio::net::TcpListener;

use crate::tensors::Tensor;
use crate::App;

const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// An input's or an output's description (`InferInputTensor` and `InferOutputTensor` number
/// these three fields alike; the spike reads and writes no others).
#[derive(Clone, PartialEq, Message)]
struct TensorHead {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    datatype: String,
    #[prost(int64, repeated, tag = "3")]
    shape: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct ModelInferRequest {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
    #[prost(message, repeated, tag = "5")]
    inputs: Vec<TensorHead>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    raw_input_contents: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct ModelInferResponse {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
    #[prost(message, repeated, tag = "5")]
    outputs: Vec<TensorHead>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    raw_output_contents: Vec<Vec<u8>>,
}

/// Accept connections, each served on its own task, each call on its own task.
pub async fn serve(app: Arc<App>, listener: TcpListener) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let _ = socket.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(mut connection) = h2::server::handshake(socket).await else {
                return;
            };
            while let Some(Ok((request, respond))) = connection.accept().await {
                tokio::spawn(call(app.clone(), request, respond));
            }
        });
    }
}

fn status(respond: &mut SendResponse<Bytes>, code: u32, message: &str) {
    // A trailers-only answer: the status in the response's headers.
    let mut headers = http::response::Builder::new()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", code.to_string());
    if let Ok(value) = HeaderValue::from_str(message) {
        headers = headers.header("grpc-message", value);
    }
    let _ = respond.send_response(headers.body(()).expect("a response"), true);
}

async fn call(app: Arc<App>, request: Request<h2::RecvStream>, mut respond: SendResponse<Bytes>) {
    if request.uri().path() != MODEL_INFER {
        return status(&mut respond, 12, "not served by this spike"); // UNIMPLEMENTED
    }
    let mut body = request.into_body();
    let mut received = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else { return };
        let _ = body.flow_control().release_capacity(chunk.len());
        received.extend_from_slice(&chunk);
    }
    if received.len() < 5 || received[0] != 0 {
        return status(&mut respond, 3, "a message this spike does not read"); // INVALID_ARGUMENT
    }
    let length = u32::from_be_bytes([received[1], received[2], received[3], received[4]]) as usize;
    let Some(message) = received.get(5..5 + length) else {
        return status(&mut respond, 3, "a message shorter than its length");
    };
    let Ok(request) = ModelInferRequest::decode(message) else {
        return status(&mut respond, 3, "a ModelInferRequest that does not decode");
    };
    if request.raw_input_contents.len() != request.inputs.len() {
        return status(&mut respond, 3, "the spike reads raw_input_contents only");
    }
    let inputs: Vec<Tensor> = request
        .inputs
        .into_iter()
        .zip(request.raw_input_contents)
        .map(|(t, raw)| Tensor {
            name: t.name,
            datatype: t.datatype,
            shape: t.shape,
            raw,
        })
        .collect();
    let outputs = match app.execute(&inputs).await {
        Ok(outputs) => outputs,
        Err(why) => return status(&mut respond, 13, &why), // INTERNAL
    };
    let mut answer = ModelInferResponse {
        model_name: app.model.clone(),
        model_version: "1".to_string(),
        id: request.id,
        ..Default::default()
    };
    for output in outputs {
        answer.outputs.push(TensorHead {
            name: output.name,
            datatype: output.datatype,
            shape: output.shape,
        });
        answer.raw_output_contents.push(output.raw);
    }
    let mut framed = BytesMut::with_capacity(5 + answer.encoded_len());
    framed.put_u8(0);
    framed.put_u32(answer.encoded_len() as u32);
    answer.encode(&mut framed).expect("room for the message");
    let head = Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("a response");
    let Ok(mut stream) = respond.send_response(head, false) else {
        return;
    };
    if stream.send_data(framed.freeze(), false).is_err() {
        return;
    }
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let _ = stream.send_trailers(trailers);
}
