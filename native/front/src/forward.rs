//! One request, forwarded whole to `thaw serve` and its answer back: the method, the target's
//! path and query, the end-to-end headers and the body, streamed both ways (a large upload or a
//! server-sent-events answer is never held whole). The hop-by-hop headers stay on their hop
//! (RFC 9110 §7.6.1), except that `thaw serve` closing its connection after an answer closes
//! the client's too, so a refusal that leaves a body unread ends the connection as it does
//! without the front.

use std::convert::Infallible;

use hyper::body::HttpBody;
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, HOST, SERVER, TRANSFER_ENCODING,
};
use hyper::{Body, Request, Response, StatusCode, Uri, Version};

use crate::upstream::Upstream;

/// Headers that belong to one connection (RFC 9110 §7.6.1, and `Expect`: the front answers
/// `100-continue` itself by reading the body).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// `{"error": text}`, as every error `thaw serve` writes.
pub fn refusal(status: StatusCode, text: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": text }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(SERVER, HeaderValue::from_static("thaw"));
    response
}

/// Whether `headers` say the connection closes after this message.
fn says_close(headers: &HeaderMap) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        value
            .to_str()
            .map(|text| {
                text.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("close"))
            })
            .unwrap_or(false)
    })
}

/// The end-to-end headers of `headers`: without the hop-by-hop ones and those `Connection`
/// names.
pub fn end_to_end(headers: &HeaderMap, also: &[&str]) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|text| text.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    let mut kept = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name_str = name.as_str();
        if HOP_BY_HOP.contains(&name_str) || also.contains(&name_str) || named.contains(name) {
            continue;
        }
        kept.append(name.clone(), value.clone());
    }
    kept
}

/// An error's text with its causes ("error from user's HttpBody stream: invalid chunk size").
pub fn cause(exc: &(dyn std::error::Error + 'static)) -> String {
    let mut text = exc.to_string();
    let mut source = exc.source();
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    text
}

/// The methods `thaw serve`'s parser (llhttp) knows; it refuses any other (400), so the front
/// does too rather than hand the application a request it never sees without the front.
const KNOWN_METHODS: [&str; 35] = [
    "DELETE",
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "CONNECT",
    "OPTIONS",
    "TRACE",
    "COPY",
    "LOCK",
    "MKCOL",
    "MOVE",
    "PROPFIND",
    "PROPPATCH",
    "SEARCH",
    "UNLOCK",
    "BIND",
    "REBIND",
    "UNBIND",
    "ACL",
    "REPORT",
    "MKACTIVITY",
    "CHECKOUT",
    "MERGE",
    "M-SEARCH",
    "NOTIFY",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PATCH",
    "PURGE",
    "MKCALENDAR",
    "LINK",
    "UNLINK",
    "SOURCE",
    "QUERY",
];

/// A body refused unread is read (and dropped) up to this much, so that the connection can
/// go on; past it the connection closes after the answer.
const DRAIN_CAP: usize = 64 << 20;

/// Python's `repr` of a short string, as `thaw serve`'s messages quote names.
fn python_repr(text: &str) -> String {
    if text.contains('\'') && !text.contains('"') {
        format!("\"{text}\"")
    } else {
        format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// The 501 text for transfer codings other than chunked, as thawserver/transfer_coding.py
/// words it; None when there are none.
pub fn unsupported_codings(headers: &HeaderMap) -> Option<String> {
    let unknown: Vec<String> = headers
        .get_all(TRANSFER_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|item| {
            item.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|coding| !coding.is_empty() && coding != "chunked")
        .collect();
    if unknown.is_empty() {
        return None;
    }
    let names: Vec<String> = unknown
        .iter()
        .take(4)
        .map(|coding| python_repr(&coding.chars().take(40).collect::<String>()))
        .collect();
    Some(format!(
        "transfer coding {} is not implemented; only 'chunked' is",
        names.join(", ")
    ))
}

/// The 501 for a body in a transfer coding the servers do not decode, its body read first.
async fn refuse_codings(message: &str, mut body: Body) -> Response<Body> {
    let mut read = 0;
    let mut whole = true;
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(bytes) if read + bytes.len() <= DRAIN_CAP => read += bytes.len(),
            _ => {
                whole = false;
                break;
            }
        }
    }
    let mut response = refusal(StatusCode::NOT_IMPLEMENTED, message);
    if !whole {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `request`, sent to `thaw serve`; its answer, or a 502 saying why there is none.
pub async fn forward(
    upstream: Upstream,
    request: Request<Body>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    if !KNOWN_METHODS.contains(&parts.method.as_str()) {
        let method: String = parts.method.as_str().chars().take(40).collect();
        return Ok(refusal(
            StatusCode::BAD_REQUEST,
            &format!("unknown method {}", python_repr(&method)),
        ));
    }
    if parts.version == Version::HTTP_11 && !parts.headers.contains_key(HOST) {
        // RFC 9112 §3.2, in `thaw serve`'s words (its parser would refuse it as it streams).
        return Ok(refusal(
            StatusCode::BAD_REQUEST,
            "Missing 'Host' header in request.",
        ));
    }
    if let Some(message) = unsupported_codings(&parts.headers) {
        return Ok(refuse_codings(&message, body).await);
    }
    let Some(target) = parts.uri.path_and_query().map(|p| p.as_str().to_owned()) else {
        return Ok(refusal(
            StatusCode::BAD_REQUEST,
            "the request target is not a path",
        ));
    };
    let uri: Uri = match format!("http://thaw-serve{target}").parse() {
        Ok(uri) => uri,
        Err(_) => {
            return Ok(refusal(
                StatusCode::BAD_REQUEST,
                "the request target is not a path",
            ))
        }
    };
    let mut outgoing = Request::new(body);
    // hyper's record of the headers' case as the client wrote them: `thaw serve` sees the
    // names as sent (a model reads forwarded headers by name: Triton's `MY_HEADER`).
    *outgoing.extensions_mut() = parts.extensions;
    *outgoing.method_mut() = parts.method;
    *outgoing.uri_mut() = uri;
    *outgoing.version_mut() = Version::HTTP_11;
    // A length beside chunked (framing.rs lets one through only where both agree) is not the
    // length of the decoded body: RFC 9112 §6.3, the Transfer-Encoding overrides it.
    let chunked = parts.headers.contains_key(TRANSFER_ENCODING);
    let dropped: &[&str] = if chunked {
        &["expect", "content-length"]
    } else {
        &["expect"]
    };
    *outgoing.headers_mut() = end_to_end(&parts.headers, dropped);
    Ok(exchange(upstream, outgoing).await)
}

/// `outgoing`, sent to `thaw serve`; its answer as the client gets it, or a 502 (a 400 when
/// the client's own body broke off).
pub async fn exchange(upstream: Upstream, outgoing: Request<Body>) -> Response<Body> {
    let answer = match upstream.request(outgoing).await {
        Ok(answer) => answer,
        // The client's body broke off or was malformed (a bad chunk size): the client's fault.
        Err(exc) if exc.is_user() => {
            return refusal(
                StatusCode::BAD_REQUEST,
                &format!("the request body could not be read: {}", cause(&exc)),
            )
        }
        Err(exc) => {
            return refusal(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "the server behind the native front did not answer: {}",
                    cause(&exc)
                ),
            )
        }
    };
    let (parts, body) = answer.into_parts();
    let close = says_close(&parts.headers);
    let mut response = Response::new(body);
    *response.extensions_mut() = parts.extensions; // the answer's header case, as written
    *response.status_mut() = parts.status;
    *response.headers_mut() = end_to_end(&parts.headers, &[]);
    if close {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_end_to_end_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, X-Hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("expect", HeaderValue::from_static("100-continue"));
        headers.append("x-kept", HeaderValue::from_static("a"));
        headers.append("x-kept", HeaderValue::from_static("b"));
        headers.insert(
            "inference-header-content-length",
            HeaderValue::from_static("7"),
        );
        let kept = end_to_end(&headers, &["expect"]);
        let names: Vec<&str> = kept.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-kept", "inference-header-content-length"]);
        assert_eq!(kept.get_all("x-kept").iter().count(), 2);
    }

    #[test]
    fn names_unsupported_codings_as_thaw_serve_does() {
        let mut headers = HeaderMap::new();
        headers.insert(
            TRANSFER_ENCODING,
            HeaderValue::from_static("GZIP, x-unknown;q=1, chunked"),
        );
        assert_eq!(
            unsupported_codings(&headers).unwrap(),
            "transfer coding 'gzip', 'x-unknown' is not implemented; only 'chunked' is"
        );
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        assert_eq!(unsupported_codings(&headers), None);
        assert_eq!(python_repr("it's"), "\"it's\"");
    }

    #[test]
    fn reads_close_in_any_case_and_list() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("Upgrade, CLOSE"));
        assert!(says_close(&headers));
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive"));
        assert!(!says_close(&headers));
    }
}
