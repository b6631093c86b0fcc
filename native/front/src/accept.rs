//! Which infer requests the front answers itself: only those certainly valid for the served
//! version (decision 0032 phase 2). Anything else goes, whole, to `thaw serve`, which answers
//! it with its own texts, errors included.

use crate::registry::{InputSpec, Served};
use crate::request_doc::{self, Scalar};
use crate::wire::OutTensor;

/// A request the front takes.
#[derive(Debug)]
pub struct Accepted {
    pub id: String,
    /// The inputs, in the request's order, in their wire bytes.
    pub inputs: Vec<OutTensor>,
    /// The requested outputs (name, its own binary_data), if any were named.
    pub outputs: Option<Vec<(String, Option<bool>)>>,
    /// `binary_data_output`.
    pub binary_default: bool,
    pub batch_size: u64,
}

/// The item size of the datatypes the front takes.
pub fn itemsize(datatype: &str) -> Option<usize> {
    Some(match datatype {
        "BOOL" | "INT8" | "UINT8" => 1,
        "INT16" | "UINT16" => 2,
        "FP32" | "INT32" | "UINT32" => 4,
        "FP64" | "INT64" | "UINT64" => 8,
        _ => return None,
    })
}

/// One JSON value of `datatype`, appended to `out` as little-endian bytes.
fn push_value(datatype: &str, value: Scalar, out: &mut Vec<u8>) -> Option<()> {
    fn int<T: TryFrom<i64> + TryFrom<u64>>(value: Scalar) -> Option<T> {
        match value {
            Scalar::I64(n) => T::try_from(n).ok(),
            Scalar::U64(n) => T::try_from(n).ok(),
            _ => None,
        }
    }
    let float = match value {
        Scalar::I64(n) => Some(n as f64),
        Scalar::U64(n) => Some(n as f64),
        Scalar::F64(x) => Some(x),
        Scalar::Bool(_) => None,
    };
    match datatype {
        "BOOL" => match value {
            Scalar::Bool(b) => out.push(b as u8),
            _ => return None,
        },
        "INT8" => out.extend_from_slice(&int::<i8>(value)?.to_le_bytes()),
        "INT16" => out.extend_from_slice(&int::<i16>(value)?.to_le_bytes()),
        "INT32" => out.extend_from_slice(&int::<i32>(value)?.to_le_bytes()),
        "INT64" => out.extend_from_slice(&int::<i64>(value)?.to_le_bytes()),
        "UINT8" => out.extend_from_slice(&int::<u8>(value)?.to_le_bytes()),
        "UINT16" => out.extend_from_slice(&int::<u16>(value)?.to_le_bytes()),
        "UINT32" => out.extend_from_slice(&int::<u32>(value)?.to_le_bytes()),
        "UINT64" => out.extend_from_slice(&int::<u64>(value)?.to_le_bytes()),
        "FP32" => out.extend_from_slice(&(float? as f32).to_le_bytes()),
        "FP64" => out.extend_from_slice(&float?.to_le_bytes()),
        _ => return None,
    }
    Some(())
}

/// The JSON part's length, from `Inference-Header-Content-Length`: ASCII digits, 0 < n ≤ the
/// body's length.
fn json_length(header: Option<&[u8]>, body_len: usize) -> Option<usize> {
    let Some(text) = header else {
        return Some(body_len);
    };
    if text.is_empty() || text.len() > 18 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: usize = std::str::from_utf8(text).ok()?.parse().ok()?;
    (n > 0 && n <= body_len).then_some(n)
}

/// The element count of an input of `shape` (each dimension ≥ 1) for the config's input
/// `spec`: its dimensions (-1 takes any), after the batch dimension where the version batches
/// (at most max_batch_size, the same in every input: `batch_size`). None: not certainly valid.
pub fn shape_count(
    served: &Served,
    spec: &InputSpec,
    shape: &[i64],
    batch_size: &mut Option<u64>,
) -> Option<u64> {
    if shape.iter().any(|&d| d < 1) {
        return None;
    }
    let dims = if served.max_batch_size > 0 {
        if shape.len() != spec.dims.len() + 1 || shape[0] > served.max_batch_size {
            return None;
        }
        let batch = shape[0] as u64;
        if *batch_size.get_or_insert(batch) != batch {
            return None;
        }
        &shape[1..]
    } else {
        if shape.len() != spec.dims.len() {
            return None;
        }
        shape
    };
    if !dims
        .iter()
        .zip(&spec.dims)
        .all(|(&d, &c)| c == -1 || d == c)
    {
        return None;
    }
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
}

/// The request, if the front takes it.
pub fn accept(served: &Served, body: &[u8], header_length: Option<&[u8]>) -> Option<Accepted> {
    let split = json_length(header_length, body.len())?;
    let doc = request_doc::read(&body[..split])?;
    let mut binary = &body[split..];
    if doc.inputs.len() != served.inputs.len() {
        return None;
    }
    let mut seen = vec![false; served.inputs.len()];
    let mut inputs = Vec::with_capacity(doc.inputs.len());
    let mut batch_size: Option<u64> = None;
    for input in doc.inputs {
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
        let nbytes = (count as usize).checked_mul(size)?;
        if nbytes > body.len() * 8 + 64 {
            return None; // more elements than a 1 MiB body can name
        }
        let data = match (input.data, input.binary_size) {
            (Some(values), None) => {
                if values.len() as u64 != count {
                    return None;
                }
                let mut out = Vec::with_capacity(nbytes);
                for value in values {
                    push_value(&input.datatype, value, &mut out)?;
                }
                out
            }
            (None, Some(n)) => {
                let n = n as usize;
                if n != nbytes || n > binary.len() {
                    return None;
                }
                let (taken, rest) = binary.split_at(n);
                binary = rest;
                taken.to_vec()
            }
            _ => return None,
        };
        inputs.push(OutTensor {
            name: input.name,
            datatype: input.datatype,
            shape: input.shape,
            data,
        });
    }
    if !binary.is_empty() {
        return None;
    }
    let outputs = match doc.outputs {
        None => None,
        Some(list) => {
            let mut named: Vec<(String, Option<bool>)> = Vec::with_capacity(list.len());
            for output in list {
                if !served.outputs.iter().any(|(n, _)| *n == output.name)
                    || named.iter().any(|(n, _)| *n == output.name)
                {
                    return None;
                }
                named.push((output.name, output.binary));
            }
            Some(named)
        }
    };
    Some(Accepted {
        id: doc.id.unwrap_or_default(),
        inputs,
        outputs,
        binary_default: doc.binary_default.unwrap_or(false),
        batch_size: batch_size.unwrap_or(1),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A served version with inputs A (FP32, [-1]) and B (INT32, [2]), outputs Y and Z.
    pub(crate) fn served(max_batch_size: i64) -> Served {
        Served {
            model: "m".into(),
            version: "1".into(),
            max_batch_size,
            inputs: vec![
                InputSpec {
                    name: "A".into(),
                    datatype: "FP32".into(),
                    dims: vec![-1],
                },
                InputSpec {
                    name: "B".into(),
                    datatype: "INT32".into(),
                    dims: vec![2],
                },
            ],
            outputs: vec![("Y".into(), "FP32".into()), ("Z".into(), "BYTES".into())],
            token: "t".into(),
            stdlib_json: false,
        }
    }

    const A: &str = r#"{"name":"A","datatype":"FP32","shape":[3],"data":[1,2.5,-3]}"#;
    const B: &str = r#"{"name":"B","datatype":"INT32","shape":[2],"data":[1,2]}"#;

    #[test]
    fn takes_only_what_is_certainly_valid() {
        let s = served(0);
        let cases: Vec<(String, bool)> = vec![
            (format!(r#"{{"inputs":[{A},{B}]}}"#), true),
            (
                format!(r#"{{"id":"x","inputs":[{B},{A}],"outputs":[{{"name":"Y"}}]}}"#),
                true,
            ),
            (
                format!(r#"{{"inputs":[{A},{B}],"parameters":{{"binary_data_output":true}}}}"#),
                true,
            ),
            (
                format!(
                    r#"{{"inputs":[{A},{B}],"outputs":[{{"name":"Y","parameters":{{"binary_data":false}}}}]}}"#
                ),
                true,
            ),
            (format!(r#"{{"inputs":[{A}]}}"#), false),
            (format!(r#"{{"inputs":[{A},{A},{B}]}}"#), false),
            (format!(r#"{{"inputs":[{A},{B}],"extra":1}}"#), false),
            (format!(r#"{{"id":1,"inputs":[{A},{B}]}}"#), false),
            (
                format!(r#"{{"inputs":[{A},{B}],"outputs":[{{"name":"Q"}}]}}"#),
                false,
            ),
            (
                format!(r#"{{"inputs":[{A},{B}],"outputs":[{{"name":"Y"}},{{"name":"Y"}}]}}"#),
                false,
            ),
            (
                format!(r#"{{"inputs":[{A},{B}],"parameters":{{"priority":1}}}}"#),
                false,
            ),
            (
                format!(r#"{{"inputs":[{A},{}]}}"#, B.replace("[1,2]", "[1,2.0]")),
                false,
            ),
            (
                format!(r#"{{"inputs":[{A},{}]}}"#, B.replace("[1,2]", "[1,2,3]")),
                false,
            ),
            (
                format!(r#"{{"inputs":[{A},{}]}}"#, B.replace("[1,2]", "[[1,2]]")),
                false,
            ),
            (
                format!(
                    r#"{{"inputs":[{A},{}]}}"#,
                    B.replace("[1,2]", "[1,4294967296]")
                ),
                false,
            ),
            (
                format!(r#"{{"inputs":[{A},{}]}}"#, B.replace("[2]", "[3]")),
                false,
            ),
            (
                format!(r#"{{"inputs":[{A},{}]}}"#, B.replace("INT32", "INT64")),
                false,
            ),
            (
                format!(
                    r#"{{"inputs":[{},{B}]}}"#,
                    A.replace("[3]", "[0]").replace("[1,2.5,-3]", "[]")
                ),
                false,
            ),
            ("[]".to_string(), false),
            ("{".to_string(), false),
        ];
        for (body, taken) in cases {
            assert_eq!(accept(&s, body.as_bytes(), None).is_some(), taken, "{body}");
        }
    }

    #[test]
    fn reads_binary_inputs_and_batches() {
        let s = served(4);
        let json = r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[2,1],"parameters":{"binary_data_size":8}},{"name":"B","datatype":"INT32","shape":[2,2],"data":[1,2,3,4]}]}"#;
        let mut body = json.as_bytes().to_vec();
        body.extend_from_slice(&1f32.to_le_bytes());
        body.extend_from_slice(&2f32.to_le_bytes());
        let length = json.len().to_string();
        let taken = accept(&s, &body, Some(length.as_bytes())).unwrap();
        assert_eq!(taken.batch_size, 2);
        assert_eq!(taken.inputs[0].data.len(), 8);
        assert_eq!(taken.inputs[1].data[..4], 1i32.to_le_bytes());
        // A byte left over, a bad header length, a batch past the maximum: forwarded.
        let mut longer = body.clone();
        longer.push(0);
        assert!(accept(&s, &longer, Some(length.as_bytes())).is_none());
        assert!(accept(&s, &body, Some(b"0")).is_none());
        assert!(accept(&s, &body, Some(b"+5")).is_none());
        assert!(accept(&s, &body, Some(b"99999")).is_none());
        let big = body.clone();
        let big = String::from_utf8_lossy(&big).replace("[2,1]", "[5,1]");
        assert!(accept(&s, big.as_bytes(), Some(length.as_bytes())).is_none());
        // Batch sizes that disagree.
        let json2 = r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[1,1],"data":[1]},{"name":"B","datatype":"INT32","shape":[2,2],"data":[1,2,3,4]}]}"#;
        assert!(accept(&s, json2.as_bytes(), None).is_none());
    }
}
