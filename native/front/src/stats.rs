//! The counts of the infers the front answered itself, since the last `stats` reply: one row
//! per (model, version, batch size), as `thaw serve` merges them into its statistics.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};

/// One success's times (ns).
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub request: u64,
    pub queue: u64,
    pub input: u64,
    pub infer: u64,
    pub output: u64,
}

#[derive(Default, Clone, Copy)]
struct Row {
    successes: u64,
    sums: Timings,
    last_ms: u64,
}

#[derive(Default)]
pub struct Stats {
    rows: Mutex<HashMap<(String, String, u64), Row>>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Stats {
    pub fn success(&self, model: &str, version: &str, batch_size: u64, t: Timings) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let row = rows
            .entry((model.to_string(), version.to_string(), batch_size))
            .or_default();
        row.successes += 1;
        row.sums.request += t.request;
        row.sums.queue += t.queue;
        row.sums.input += t.input;
        row.sums.infer += t.infer;
        row.sums.output += t.output;
        row.last_ms = now_ms();
    }

    /// `[M, V, batch_size, successes, request_ns, queue_ns, input_ns, infer_ns, output_ns,
    /// last_ms]` per row, the counts then zeroed.
    pub fn take(&self) -> Vec<Value> {
        let rows = std::mem::take(&mut *self.rows.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out: Vec<Value> = rows
            .into_iter()
            .map(|((m, v, b), r)| {
                json!([
                    m,
                    v,
                    b,
                    r.successes,
                    r.sums.request,
                    r.sums.queue,
                    r.sums.input,
                    r.sums.infer,
                    r.sums.output,
                    r.last_ms
                ])
            })
            .collect();
        out.sort_by_key(|row| row.to_string());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_zeroes() {
        let stats = Stats::default();
        let t = Timings {
            request: 10,
            queue: 1,
            input: 2,
            infer: 3,
            output: 4,
        };
        stats.success("m", "1", 1, t);
        stats.success("m", "1", 1, t);
        let rows = stats.take();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][3], 2);
        assert_eq!(rows[0][4], 20);
        assert_eq!(rows[0][8], 8);
        assert!(stats.take().is_empty());
    }
}
