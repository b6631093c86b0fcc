//! Numeric tensors between JSON values and little-endian bytes (the only kinds the spike serves).

use serde_json::{json, Value};

/// A tensor as the stub's wire carries it: v2 datatype, shape, little-endian bytes.
pub struct Tensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub raw: Vec<u8>,
}

pub fn item_size(datatype: &str) -> Option<usize> {
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
pub fn encode_data(datatype: &str, data: &Value, count: usize) -> Result<Vec<u8>, String> {
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
pub fn decode_data(datatype: &str, raw: &[u8]) -> Result<Vec<Value>, String> {
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
