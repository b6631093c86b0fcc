//! KServe v2's `ModelInferRequest` and `ModelInferResponse` (grpc_service.proto), every field
//! declared with its number so the front can tell which a request sets; which `ModelInfer`
//! calls the front takes (the HTTP rules of accept.rs, in gRPC's form), and the answer as
//! `thaw serve`'s gRPC surface writes it (runtime/codecs/protobuf.py `encode_model_infer`).

use std::collections::HashMap;

use prost::Message;
use serde_json::Value;

use crate::accept::{itemsize, shape_count, Accepted};
use crate::answer::python_repr;
use crate::registry::Served;
use crate::wire::{InTensor, OutTensor};

/// The largest message the front reads (larger: forwarded unread).
pub const MAX_MESSAGE: usize = 1 << 20;

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ParameterChoice {
    #[prost(bool, tag = "1")]
    Bool(bool),
    #[prost(int64, tag = "2")]
    Int64(i64),
    #[prost(string, tag = "3")]
    String(String),
    #[prost(double, tag = "4")]
    Double(f64),
    #[prost(uint64, tag = "5")]
    Uint64(u64),
}

#[derive(Clone, PartialEq, Message)]
pub struct InferParameter {
    #[prost(oneof = "ParameterChoice", tags = "1, 2, 3, 4, 5")]
    pub parameter_choice: Option<ParameterChoice>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InferTensorContents {
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub bytes_contents: Vec<Vec<u8>>,
}

/// `InferInputTensor` and `InferOutputTensor` number their fields alike.
#[derive(Clone, PartialEq, Message)]
pub struct Tensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RequestedOutput {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, message", tag = "2")]
    pub parameters: HashMap<String, InferParameter>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<Tensor>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<RequestedOutput>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ModelInferResponse {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<Tensor>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub raw_output_contents: Vec<Vec<u8>>,
}

/// The one message of a gRPC request body: an uncompressed frame holding all of it.
pub fn unframe(body: &[u8]) -> Option<&[u8]> {
    if body.len() < 5 || body[0] != 0 {
        return None;
    }
    let n = u32::from_be_bytes(body[1..5].try_into().ok()?) as usize;
    (n <= MAX_MESSAGE && body.len() == 5 + n).then(|| &body[5..])
}

/// `message` in one uncompressed gRPC frame.
pub fn frame(message: &impl Message) -> Vec<u8> {
    let n = message.encoded_len();
    let mut out = Vec::with_capacity(5 + n);
    out.push(0);
    out.extend_from_slice(&(n as u32).to_be_bytes());
    message.encode(&mut out).expect("a Vec grows");
    out
}

/// The request, if the front takes it for `served`: inputs exactly the config's (names,
/// datatypes, shapes), each one's bytes in its own `raw_input_contents` entry of the exact
/// size, no typed contents, no parameters anywhere, outputs named once each.
pub fn accept(served: &Served, request: ModelInferRequest) -> Option<Accepted> {
    if !request.parameters.is_empty()
        || request.inputs.len() != served.inputs.len()
        || request.raw_input_contents.len() != request.inputs.len()
    {
        return None;
    }
    let mut seen = vec![false; served.inputs.len()];
    let mut batch_size = None;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for (input, data) in request.inputs.into_iter().zip(request.raw_input_contents) {
        if !input.parameters.is_empty() || input.contents.is_some() {
            return None;
        }
        let index = served.inputs.iter().position(|s| s.name == input.name)?;
        if std::mem::replace(&mut seen[index], true) {
            return None;
        }
        let spec = &served.inputs[index];
        if input.datatype != spec.datatype {
            return None;
        }
        let size = itemsize(&input.datatype)?;
        let count = shape_count(served, spec, &input.shape, &mut batch_size)?;
        if (count as u128) * (size as u128) != data.len() as u128 {
            return None;
        }
        inputs.push(OutTensor {
            name: input.name,
            datatype: input.datatype,
            shape: input.shape,
            data,
        });
    }
    let mut named: Vec<(String, Option<bool>)> = Vec::with_capacity(request.outputs.len());
    for output in request.outputs {
        if !output.parameters.is_empty()
            || !served.outputs.iter().any(|(n, _)| *n == output.name)
            || named.iter().any(|(n, _)| *n == output.name)
        {
            return None;
        }
        named.push((output.name, None));
    }
    Some(Accepted {
        id: request.id,
        inputs,
        outputs: (!named.is_empty()).then_some(named),
        binary_default: true,
        batch_size: batch_size.unwrap_or(1),
    })
}

/// A Python string's `repr`: single quotes unless it holds one and no double quote.
fn repr_str(text: &str, out: &mut String) {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// A JSON value as Python's `str()` writes what `json.loads` made of it (`set_parameter`
/// writes a list or a dict so).
fn python_str(item: &Value, out: &mut String, top: bool) {
    match item {
        Value::Null => out.push_str("None"),
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::Number(n) if n.is_f64() => {
            let v = n.as_f64().unwrap_or(f64::NAN);
            let text = python_repr(v);
            out.push_str(match text.as_str() {
                "NaN" => "nan",
                "Infinity" => "inf",
                "-Infinity" => "-inf",
                other => other,
            });
        }
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(text) if top => out.push_str(text),
        Value::String(text) => repr_str(text, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_str(item, out, false);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_str(key, out);
                out.push_str(": ");
                python_str(item, out, false);
            }
            out.push('}');
        }
    }
}

/// A response parameter as `set_parameter` types it: bool, int64 (uint64 past it), double,
/// string; anything else as its Python text.
fn parameter(item: &Value) -> InferParameter {
    let choice = match item {
        Value::Bool(b) => ParameterChoice::Bool(*b),
        Value::Number(n) if n.is_i64() => ParameterChoice::Int64(n.as_i64().unwrap_or(0)),
        Value::Number(n) if n.is_u64() => ParameterChoice::Uint64(n.as_u64().unwrap_or(0)),
        Value::Number(n) => ParameterChoice::Double(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(text) => ParameterChoice::String(text.clone()),
        other => {
            let mut text = String::new();
            python_str(other, &mut text, true);
            ParameterChoice::String(text)
        }
    };
    InferParameter {
        parameter_choice: Some(choice),
    }
}

/// The answer to `request`: the stub's outputs in its order (only the requested ones where
/// any were named, else only those the config declares), each in `raw_output_contents`; the
/// response's parameters typed.
pub fn encode(
    served: &Served,
    request: &Accepted,
    params: &Value,
    outputs: Vec<InTensor>,
) -> ModelInferResponse {
    let mut response = ModelInferResponse {
        model_name: served.model.clone(),
        model_version: served.version.clone(),
        id: request.id.clone(),
        ..ModelInferResponse::default()
    };
    if let Some(members) = params.as_object() {
        for (key, item) in members {
            if key != "binary_data_size" {
                response.parameters.insert(key.clone(), parameter(item));
            }
        }
    }
    for tensor in outputs {
        let wanted = match &request.outputs {
            Some(named) => named.iter().any(|(n, _)| *n == tensor.name),
            // None named: the outputs the config declares (a model's extra one is dropped, as
            // `ModelSignature.finish` drops it and the HTTP answer does: answer.rs).
            None => served.outputs.iter().any(|(n, _)| *n == tensor.name),
        };
        if !wanted {
            continue;
        }
        response.outputs.push(Tensor {
            name: tensor.name,
            datatype: tensor.datatype,
            shape: tensor.shape,
            ..Tensor::default()
        });
        response.raw_output_contents.push(tensor.data);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accept::tests::served;
    use serde_json::json;

    fn input(name: &str, datatype: &str, shape: Vec<i64>) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            ..Tensor::default()
        }
    }

    fn good(batch: bool) -> ModelInferRequest {
        let (a, b) = if batch {
            (vec![2, 3], vec![2, 2])
        } else {
            (vec![3], vec![2])
        };
        let n = if batch { 2 } else { 1 };
        ModelInferRequest {
            model_name: "m".into(),
            id: "r".into(),
            inputs: vec![input("A", "FP32", a), input("B", "INT32", b)],
            raw_input_contents: vec![vec![0; 12 * n], vec![0; 8 * n]],
            ..ModelInferRequest::default()
        }
    }

    fn param(value: ParameterChoice) -> InferParameter {
        InferParameter {
            parameter_choice: Some(value),
        }
    }

    #[test]
    fn takes_only_what_is_certainly_valid() {
        let s = served(0);
        let taken = accept(&s, good(false)).unwrap();
        assert_eq!(taken.id, "r");
        assert_eq!(taken.batch_size, 1);
        assert!(taken.outputs.is_none());
        let batched = accept(&served(4), good(true)).unwrap();
        assert_eq!(batched.batch_size, 2);
        type Change = fn(&mut ModelInferRequest);
        let refused: Vec<(&str, Change)> = vec![
            ("a request parameter", |r| {
                r.parameters
                    .insert("priority".into(), param(ParameterChoice::Int64(1)));
            }),
            ("an input parameter", |r| {
                r.inputs[0].parameters.insert(
                    "shared_memory_region".into(),
                    param(ParameterChoice::String("x".into())),
                );
            }),
            ("typed contents, even empty", |r| {
                r.inputs[0].contents = Some(InferTensorContents::default());
            }),
            ("a raw entry short", |r| {
                r.raw_input_contents[1].pop();
            }),
            ("a raw entry too many", |r| {
                r.raw_input_contents.push(vec![])
            }),
            ("a raw entry missing", |r| {
                r.raw_input_contents.pop();
            }),
            ("an input missing", |r| {
                r.inputs.pop();
                r.raw_input_contents.pop();
            }),
            ("an input twice", |r| r.inputs[1] = r.inputs[0].clone()),
            ("an unknown input", |r| r.inputs[0].name = "Q".into()),
            ("a datatype not the config's", |r| {
                r.inputs[1].datatype = "INT64".into()
            }),
            ("a fixed dimension not the config's", |r| {
                r.inputs[1].shape = vec![3]
            }),
            ("a zero dimension", |r| r.inputs[0].shape = vec![0]),
            ("a rank not the config's", |r| {
                r.inputs[0].shape = vec![1, 3]
            }),
            ("an unknown output", |r| {
                r.outputs.push(RequestedOutput {
                    name: "Q".into(),
                    ..RequestedOutput::default()
                })
            }),
            ("an output twice", |r| {
                for _ in 0..2 {
                    r.outputs.push(RequestedOutput {
                        name: "Y".into(),
                        ..RequestedOutput::default()
                    })
                }
            }),
            ("an output parameter", |r| {
                let mut out = RequestedOutput {
                    name: "Y".into(),
                    ..RequestedOutput::default()
                };
                out.parameters
                    .insert("classification".into(), param(ParameterChoice::Int64(2)));
                r.outputs.push(out)
            }),
        ];
        for (what, change) in refused {
            let mut request = good(false);
            change(&mut request);
            assert!(accept(&s, request).is_none(), "{what}");
        }
        let mut named = good(false);
        named.outputs.push(RequestedOutput {
            name: "Z".into(),
            ..RequestedOutput::default()
        });
        let taken = accept(&s, named).unwrap();
        assert_eq!(taken.outputs, Some(vec![("Z".to_string(), None)]));
        // Batches that disagree, or past the maximum.
        let mut request = good(true);
        request.inputs[1].shape = vec![1, 2];
        request.raw_input_contents[1] = vec![0; 8];
        assert!(accept(&served(4), request).is_none());
        assert!(accept(&served(1), good(true)).is_none());
    }

    #[test]
    fn frames_one_message() {
        let message = good(false);
        let framed = frame(&message);
        let inner = unframe(&framed).unwrap();
        assert_eq!(ModelInferRequest::decode(inner).unwrap(), message);
        let mut compressed = framed.clone();
        compressed[0] = 1;
        assert!(unframe(&compressed).is_none());
        let mut two = framed.clone();
        two.extend_from_slice(&framed);
        assert!(unframe(&two).is_none());
        assert!(unframe(&framed[..framed.len() - 1]).is_none());
    }

    #[test]
    fn encodes_the_answer_as_encode_model_infer() {
        let s = served(0);
        let mut request = good(false);
        request.outputs.push(RequestedOutput {
            name: "Z".into(),
            ..RequestedOutput::default()
        });
        let taken = accept(&s, request).unwrap();
        let outputs_again = || {
            vec![
                InTensor {
                    name: "Y".into(),
                    datatype: "FP32".into(),
                    shape: vec![1],
                    data: vec![0, 0, 128, 63],
                },
                InTensor {
                    name: "Z".into(),
                    datatype: "BYTES".into(),
                    shape: vec![1],
                    data: vec![2, 0, 0, 0, b'h', b'i'],
                },
            ]
        };
        let outputs = outputs_again();
        let params = json!({"n": 3, "big": 1u64 << 63, "f": 0.5, "ok": true, "s": "x",
            "list": [1, "it's", null, {"k": false}], "binary_data_size": 4});
        let answer = encode(&s, &taken, &params, outputs);
        assert_eq!(answer.model_name, "m");
        assert_eq!(answer.model_version, "1");
        assert_eq!(answer.id, "r");
        assert_eq!(answer.outputs.len(), 1);
        assert_eq!(answer.outputs[0].name, "Z");
        assert_eq!(answer.outputs[0].datatype, "BYTES");
        assert!(answer.outputs[0].parameters.is_empty());
        assert_eq!(answer.raw_output_contents, vec![b"\x02\0\0\0hi".to_vec()]);
        let p = |k: &str| answer.parameters[k].parameter_choice.clone().unwrap();
        assert_eq!(p("n"), ParameterChoice::Int64(3));
        assert_eq!(p("big"), ParameterChoice::Uint64(1 << 63));
        assert_eq!(p("f"), ParameterChoice::Double(0.5));
        assert_eq!(p("ok"), ParameterChoice::Bool(true));
        assert_eq!(p("s"), ParameterChoice::String("x".into()));
        assert_eq!(
            p("list"),
            ParameterChoice::String("[1, \"it's\", None, {'k': False}]".into())
        );
        assert!(!answer.parameters.contains_key("binary_data_size"));
        // None named: the config's outputs alone (a model's extra one is not answered).
        let mut extra = outputs_again();
        extra.push(InTensor {
            name: "EXTRA".into(),
            datatype: "INT32".into(),
            shape: vec![1],
            data: vec![0; 4],
        });
        let all = accept(&s, good(false)).unwrap();
        let names: Vec<String> = encode(&s, &all, &json!({}), extra)
            .outputs
            .into_iter()
            .map(|o| o.name)
            .collect();
        assert_eq!(names, vec!["Y".to_string(), "Z".to_string()]);
        // The bytes decode as the message Python's protobuf would read.
        let bytes = frame(&answer);
        let back = ModelInferResponse::decode(unframe(&bytes).unwrap()).unwrap();
        assert_eq!(back, answer);
    }
}
