//! The 200 of an infer the front answered, byte for byte as `thaw serve`'s
//! `encode_infer_response` writes it (orjson over numpy's `.tolist()`).

use serde_json::Value;

use crate::accept::Accepted;
use crate::registry::Served;
use crate::wire::InTensor;

/// An encoded answer: the body, and the JSON part's length when binary outputs follow it.
#[derive(Debug, PartialEq)]
pub struct Encoded {
    pub body: Vec<u8>,
    pub header_length: Option<usize>,
}

/// How `thaw serve` writes JSON (thawserver/fast_json.py): orjson's text, unless it holds
/// `null` anywhere (maybe a NaN orjson wrote so), when the stdlib's `json.dumps` redoes the
/// whole document; and the stdlib's alone where orjson is not installed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Style {
    Orjson,
    Stdlib,
}

fn string(text: &str, style: Style, out: &mut String) {
    match style {
        Style::Orjson => out.push_str(&serde_json::to_string(text).expect("a JSON string")),
        Style::Stdlib => {
            // json.dumps(ensure_ascii=True): only printable ASCII as it is.
            out.push('"');
            for c in text.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    ' '..='~' => out.push(c),
                    _ => {
                        let mut units = [0u16; 2];
                        for unit in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{unit:04x}"));
                        }
                    }
                }
            }
            out.push('"');
        }
    }
}

/// A float as Python's `repr` writes it (the stdlib's JSON): the shortest round trip, fixed
/// from 1e-4 up to 1e16, else `d.ddde±XX`; NaN and the infinities as `NaN`, `Infinity`.
pub fn python_repr(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sign = if value.is_sign_negative() { "-" } else { "" };
    if value == 0.0 {
        return format!("{sign}0.0");
    }
    let scientific = format!("{:e}", value.abs()); // shortest round trip: "1.5e-7"
    let (mantissa, exponent) = scientific.split_once('e').expect("an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exponent) {
        if exponent >= 0 {
            let whole = exponent as usize + 1;
            if digits.len() <= whole {
                format!("{sign}{digits}{}.0", "0".repeat(whole - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..whole], &digits[whole..])
            }
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exponent - 1) as usize))
        }
    } else {
        let fraction = if digits.len() > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{}{fraction}e{exponent_sign}{:02}",
            &digits[..1],
            exponent.abs()
        )
    }
}

/// A float as `thaw serve` writes a Python float.
fn float(value: f64, style: Style, out: &mut String) {
    match style {
        // orjson: ryu's shortest round trip with a signed exponent (`1e+16`, `1e-6`); NaN and
        // the infinities as null (which sends the document to the stdlib: `encode`).
        // (serde_json writes its floats with ryu too: the same digits, no allocation here.)
        Style::Orjson if value.is_finite() => {
            let mut digits = ryu::Buffer::new();
            let text = digits.format_finite(value);
            match text.split_once('e') {
                Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                    out.push_str(mantissa);
                    out.push_str("e+");
                    out.push_str(exponent);
                }
                _ => out.push_str(text),
            }
        }
        Style::Orjson => out.push_str("null"),
        Style::Stdlib => out.push_str(&python_repr(value)),
    }
}

/// An integer's decimal digits, appended without an allocation.
fn integer(value: impl std::fmt::Display, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "{value}");
}

/// A JSON value (a response's parameters) as `thaw serve` writes it.
fn value(item: &Value, style: Style, out: &mut String) {
    match item {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_f64() => float(n.as_f64().unwrap_or(f64::NAN), style, out),
        Value::Number(n) => integer(n, out),
        Value::String(text) => string(text, style, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                value(item, style, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(key, style, out);
                out.push(':');
                value(item, style, out);
            }
            out.push('}');
        }
    }
}

fn half(bits: u16) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exponent = ((bits >> 10) & 0x1f) as i32;
    let fraction = (bits & 0x3ff) as f32;
    match exponent {
        0 => sign * fraction * 2f32.powi(-24),
        0x1f if fraction == 0.0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        _ => sign * (1.0 + fraction / 1024.0) * 2f32.powi(exponent - 15),
    }
}

/// The flat JSON list of a tensor's elements; Err(()) when a BYTES item is not UTF-8.
pub fn json_data(tensor: &InTensor, style: Style, out: &mut String) -> Result<(), ()> {
    out.push('[');
    let data = &tensor.data;
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !std::mem::replace(&mut first, false) {
            out.push(',');
        }
    };
    macro_rules! each {
        ($t:ty, $n:expr, |$v:ident| $body:expr) => {
            for chunk in data.chunks_exact($n) {
                sep(out);
                let $v = <$t>::from_le_bytes(chunk.try_into().expect("an item"));
                $body;
            }
        };
    }
    match tensor.datatype.as_str() {
        "BOOL" => {
            for &b in data {
                sep(out);
                out.push_str(if b != 0 { "true" } else { "false" });
            }
        }
        "INT8" => each!(i8, 1, |v| integer(v, out)),
        "INT16" => each!(i16, 2, |v| integer(v, out)),
        "INT32" => each!(i32, 4, |v| integer(v, out)),
        "INT64" => each!(i64, 8, |v| integer(v, out)),
        "UINT8" => each!(u8, 1, |v| integer(v, out)),
        "UINT16" => each!(u16, 2, |v| integer(v, out)),
        "UINT32" => each!(u32, 4, |v| integer(v, out)),
        "UINT64" => each!(u64, 8, |v| integer(v, out)),
        "FP16" => each!(u16, 2, |v| float(half(v) as f64, style, out)),
        "BF16" => each!(u16, 2, |v| float(
            f32::from_bits((v as u32) << 16) as f64,
            style,
            out
        )),
        "FP32" => each!(f32, 4, |v| float(v as f64, style, out)),
        "FP64" => each!(f64, 8, |v| float(v, style, out)),
        "BYTES" => {
            let mut rest = &data[..];
            while rest.len() >= 4 {
                let n = u32::from_le_bytes(rest[..4].try_into().expect("a length")) as usize;
                let item = rest.get(4..4 + n).ok_or(())?;
                rest = &rest[4 + n..];
                sep(out);
                string(std::str::from_utf8(item).map_err(|_| ())?, style, out);
            }
        }
        _ => return Err(()),
    }
    out.push(']');
    Ok(())
}

/// The answer to `request`: the outputs (the stub's order; only the requested ones if any
/// were named), binary per output or by the request's default. Err(name): output `name`
/// holds bytes that are not UTF-8 and was asked for as JSON.
pub fn encode(
    served: &Served,
    request: &Accepted,
    params: &Value,
    outputs: &[InTensor],
) -> Result<Encoded, String> {
    if served.stdlib_json {
        return encode_as(Style::Stdlib, served, request, params, outputs);
    }
    let encoded = encode_as(Style::Orjson, served, request, params, outputs)?;
    let json = &encoded.body[..encoded.header_length.unwrap_or(encoded.body.len())];
    if json.windows(4).any(|w| w == b"null") {
        return encode_as(Style::Stdlib, served, request, params, outputs);
    }
    Ok(encoded)
}

fn encode_as(
    style: Style,
    served: &Served,
    request: &Accepted,
    params: &Value,
    outputs: &[InTensor],
) -> Result<Encoded, String> {
    let mut json = String::with_capacity(256);
    let mut buffers: Vec<&[u8]> = Vec::new();
    json.push('{');
    if !request.id.is_empty() {
        json.push_str("\"id\":");
        string(&request.id, style, &mut json);
        json.push(',');
    }
    json.push_str("\"model_name\":");
    string(&served.model, style, &mut json);
    json.push_str(",\"model_version\":");
    string(&served.version, style, &mut json);
    json.push(',');
    if params.as_object().is_some_and(|p| !p.is_empty()) {
        json.push_str("\"parameters\":");
        value(params, style, &mut json);
        json.push(',');
    }
    json.push_str("\"outputs\":[");
    let mut first = true;
    for tensor in outputs {
        let binary = match &request.outputs {
            // None named: the outputs the config declares (a model's extra one is dropped,
            // as `ModelSignature.finish` drops it), binary as the request's default says.
            None if served.outputs.iter().all(|(name, _)| *name != tensor.name) => continue,
            None => request.binary_default,
            Some(named) => match named.iter().find(|(n, _)| *n == tensor.name) {
                None => continue,
                // A listed output is binary only when it says so: `binary_data_output` is the
                // default of the outputs not listed (Triton's CheckBinaryOutputData).
                Some((_, own)) => own.unwrap_or(false),
            },
        };
        if !std::mem::replace(&mut first, false) {
            json.push(',');
        }
        json.push_str("{\"name\":");
        string(&tensor.name, style, &mut json);
        json.push_str(",\"datatype\":");
        string(&tensor.datatype, style, &mut json);
        json.push_str(",\"shape\":[");
        for (i, dim) in tensor.shape.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            integer(dim, &mut json);
        }
        json.push_str("],");
        if binary {
            json.push_str("\"parameters\":{\"binary_data_size\":");
            integer(tensor.data.len(), &mut json);
            json.push_str("}}");
            buffers.push(&tensor.data);
        } else {
            json.push_str("\"data\":");
            json_data(tensor, style, &mut json).map_err(|()| tensor.name.clone())?;
            json.push('}');
        }
    }
    json.push_str("]}");
    if buffers.is_empty() {
        return Ok(Encoded {
            body: json.into_bytes(),
            header_length: None,
        });
    }
    let header_length = json.len();
    let mut body = json.into_bytes();
    for buffer in buffers {
        body.extend_from_slice(buffer);
    }
    Ok(Encoded {
        body,
        header_length: Some(header_length),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tensor(name: &str, datatype: &str, shape: Vec<i64>, data: Vec<u8>) -> InTensor {
        InTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            data,
        }
    }

    fn served(stdlib_json: bool) -> Served {
        Served {
            model: "m".into(),
            version: "1".into(),
            max_batch_size: 0,
            inputs: vec![],
            outputs: vec![("Y".into(), "FP32".into()), ("Z".into(), "BYTES".into())],
            token: "t".into(),
            stdlib_json,
        }
    }

    #[test]
    fn writes_floats_as_pythons_repr() {
        let cases = [
            (1e-5, "1e-05"),
            (1e-4, "0.0001"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.1f32 as f64, "0.10000000149011612"),
            (1e20f32 as f64, "1.0000000200408773e+20"),
            (5e-324, "5e-324"),
            (-0.0, "-0.0"),
            (-2.5, "-2.5"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (value, text) in cases {
            assert_eq!(python_repr(value), text, "{value}");
        }
    }

    #[test]
    fn a_nan_sends_the_whole_answer_to_the_stdlibs_style() {
        let request = Accepted {
            id: "é".into(),
            inputs: vec![],
            outputs: None,
            binary_default: false,
            batch_size: 1,
        };
        let outputs = vec![tensor("Y", "FP64", vec![3], {
            [1e-5f64, f64::INFINITY, f64::NAN]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        })];
        let answer = encode(&served(false), &request, &json!({"k": "😀\u{1}"}), &outputs).unwrap();
        let text = r#"{"id":"\u00e9","model_name":"m","model_version":"1","parameters":{"k":"\ud83d\ude00\u0001"},"outputs":[{"name":"Y","datatype":"FP64","shape":[3],"data":[1e-05,Infinity,NaN]}]}"#;
        assert_eq!(String::from_utf8(answer.body).unwrap(), text);
        // Finite: orjson's style, UTF-8 as it is.
        let outputs = vec![tensor("Y", "FP32", vec![1], f32s(&[1e20]))];
        let answer = encode(&served(false), &request, &json!({}), &outputs).unwrap();
        let text = r#"{"id":"é","model_name":"m","model_version":"1","outputs":[{"name":"Y","datatype":"FP32","shape":[1],"data":[1.0000000200408773e+20]}]}"#;
        assert_eq!(String::from_utf8(answer.body).unwrap(), text);
        // No orjson where `thaw serve` runs: the stdlib's style always.
        let answer = encode(&served(true), &request, &json!({}), &outputs).unwrap();
        assert!(String::from_utf8(answer.body)
            .unwrap()
            .starts_with(r#"{"id":"\u00e9""#));
    }

    #[test]
    fn answers_the_declared_outputs_and_binary_only_where_asked() {
        let request = Accepted {
            id: String::new(),
            inputs: vec![],
            outputs: None,
            binary_default: true,
            batch_size: 1,
        };
        let outputs = vec![
            tensor("Y", "FP32", vec![1], f32s(&[1.0])),
            tensor("EXTRA", "FP32", vec![1], f32s(&[2.0])),
        ];
        // None named: the config's outputs only, binary by the request's default.
        let answer = encode(&served(false), &request, &json!({}), &outputs).unwrap();
        let text = r#"{"model_name":"m","model_version":"1","outputs":[{"name":"Y","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}]}"#;
        assert_eq!(answer.header_length, Some(text.len()));
        // Named without `binary_data`: JSON, whatever `binary_data_output` says.
        let request = Accepted {
            outputs: Some(vec![("Y".into(), None)]),
            ..request
        };
        let answer = encode(&served(false), &request, &json!({}), &outputs).unwrap();
        let text = r#"{"model_name":"m","model_version":"1","outputs":[{"name":"Y","datatype":"FP32","shape":[1],"data":[1.0]}]}"#;
        assert_eq!(String::from_utf8(answer.body).unwrap(), text);
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn formatted(t: &InTensor) -> String {
        let mut out = String::new();
        json_data(t, Style::Orjson, &mut out).unwrap();
        out
    }

    #[test]
    fn formats_values_as_orjson_does() {
        let t = tensor(
            "y",
            "FP32",
            vec![5],
            f32s(&[0.1, 1.0, f32::NAN, f32::INFINITY, 1e20]),
        );
        assert_eq!(
            formatted(&t),
            "[0.10000000149011612,1.0,null,null,1.0000000200408773e+20]"
        );
        let t = tensor(
            "y",
            "FP64",
            vec![4],
            [1e-5f64, 1e-6, 1e16, 1e15]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        assert_eq!(formatted(&t), "[0.00001,1e-6,1e+16,1000000000000000.0]");
        let t = tensor(
            "y",
            "INT64",
            vec![2],
            [-5i64, i64::MAX]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        assert_eq!(formatted(&t), "[-5,9223372036854775807]");
        let t = tensor("y", "BOOL", vec![2], vec![1, 0]);
        assert_eq!(formatted(&t), "[true,false]");
        let t = tensor(
            "y",
            "FP16",
            vec![2],
            [0x3c00u16, 0xc000]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        assert_eq!(formatted(&t), "[1.0,-2.0]");
        let mut items = Vec::new();
        for item in [&b"h\"i"[..], "é".as_bytes()] {
            items.extend_from_slice(&(item.len() as u32).to_le_bytes());
            items.extend_from_slice(item);
        }
        let t = tensor("z", "BYTES", vec![2], items);
        assert_eq!(formatted(&t), "[\"h\\\"i\",\"é\"]");
        let t = tensor("z", "BYTES", vec![1], vec![1, 0, 0, 0, 0xff]);
        assert!(json_data(&t, Style::Orjson, &mut String::new()).is_err());
    }

    #[test]
    fn encodes_the_answer() {
        let request = Accepted {
            id: "r1".into(),
            inputs: vec![],
            outputs: None,
            binary_default: false,
            batch_size: 1,
        };
        let outputs = vec![
            tensor("Y", "FP32", vec![1, 2], f32s(&[1.5, 2.0])),
            tensor("Z", "BYTES", vec![1], vec![1, 0, 0, 0, 0xff]),
        ];
        assert_eq!(
            encode(&served(false), &request, &json!({}), &outputs),
            Err("Z".to_string())
        );
        let request = Accepted {
            outputs: Some(vec![("Z".into(), Some(true)), ("Y".into(), None)]),
            ..request
        };
        let answer = encode(&served(false), &request, &json!({"b": 1, "a": 2}), &outputs).unwrap();
        let text = r#"{"id":"r1","model_name":"m","model_version":"1","parameters":{"b":1,"a":2},"outputs":[{"name":"Y","datatype":"FP32","shape":[1,2],"data":[1.5,2.0]},{"name":"Z","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":5}}]}"#;
        assert_eq!(answer.header_length, Some(text.len()));
        assert_eq!(&answer.body[..text.len()], text.as_bytes());
        assert_eq!(&answer.body[text.len()..], &[1, 0, 0, 0, 0xff]);
    }
}
