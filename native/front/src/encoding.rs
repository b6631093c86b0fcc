//! Response compression as `thaw serve` does it (runtime/http/response_encoding.py): a body of
//! at least 1024 bytes, gzip or deflate as the client's `Accept-Encoding` picks, at level 1.

use std::io::Write;

use flate2::write::{GzEncoder, ZlibEncoder};
use flate2::Compression;

pub const MIN_COMPRESS_BYTES: usize = 1024;

/// The first of gzip/deflate the client accepts (q > 0), or None.
pub fn pick_encoding(accept_encoding: &str) -> Option<&'static str> {
    for part in accept_encoding.split(',') {
        let (coding, params) = part.trim().split_once(';').unwrap_or((part.trim(), ""));
        let coding = coding.trim().to_ascii_lowercase();
        let coding = match coding.as_str() {
            "gzip" => "gzip",
            "deflate" => "deflate",
            _ => continue,
        };
        let quality = params.trim().to_ascii_lowercase();
        if let Some(q) = quality.strip_prefix("q=") {
            match python_float(q) {
                Some(q) if q > 0.0 => {}
                _ => continue,
            }
        }
        return Some(coding);
    }
    None
}

/// Python's float() of a short text (whitespace around it allowed), near enough for a q value.
fn python_float(text: &str) -> Option<f64> {
    let text = text.trim();
    match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => return Some(f64::INFINITY),
        "nan" | "+nan" | "-nan" => return Some(f64::NAN),
        _ => {}
    }
    if text.contains('_') {
        return None;
    }
    text.parse().ok()
}

/// `body` as a gzip member or a zlib stream.
pub fn compress(body: &[u8], coding: &str) -> Vec<u8> {
    let level = Compression::new(1);
    if coding == "gzip" {
        let mut encoder = GzEncoder::new(Vec::new(), level);
        encoder.write_all(body).expect("into memory");
        encoder.finish().expect("into memory")
    } else {
        let mut encoder = ZlibEncoder::new(Vec::new(), level);
        encoder.write_all(body).expect("into memory");
        encoder.finish().expect("into memory")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn picks_as_thaw_serve_does() {
        assert_eq!(pick_encoding("gzip"), Some("gzip"));
        assert_eq!(pick_encoding("br, Deflate;q=0.5, gzip"), Some("deflate"));
        assert_eq!(pick_encoding("gzip;q=0, deflate"), Some("deflate"));
        assert_eq!(pick_encoding("gzip;q=x"), None);
        assert_eq!(pick_encoding("identity"), None);
        assert_eq!(pick_encoding("gzip;level=1"), Some("gzip"));
        assert_eq!(pick_encoding(""), None);
    }

    #[test]
    fn compresses_both_ways() {
        let body = vec![b'a'; 5000];
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&compress(&body, "gzip")[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, body);
        let mut back = Vec::new();
        flate2::read::ZlibDecoder::new(&compress(&body, "deflate")[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, body);
    }
}
