//! The front's command line: `thaw-front --listen HOST:PORT --upstream SOCKET [options]`.
//! `thaw serve --front native` (runtime/process/native_front.py) is what runs it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "usage: thaw-front --listen HOST:PORT --upstream SOCKET \
[--reuse-port] [--head-timeout-s S] [--idle-timeout-s S] [--max-connections N] [--control-fd N]
[--grpc-listen HOST:PORT --grpc-upstream SOCKET [--grpc-reuse-port]]

Thaw's native front (decision 0032). It listens on HOST:PORT and forwards every request, whole,
to the `thaw serve` listening on the Unix socket SOCKET, streaming bodies both ways, except the
hot Python models' infers, which it answers itself through their stubs (given --control-fd). It
prints `THAW_FRONT_LISTENING http://HOST:PORT` once it accepts connections. On its standard
input, `stop S I` stops accepting, closes connections idle for I seconds, prints
`THAW_FRONT_OPEN N` each time the number of open connections changes, and exits when none is
left or S seconds passed (with --control-fd it goes on relaying the stubs until its standard
input ends); the end of its standard input (its `thaw serve` is gone) exits it at once.

  --reuse-port        bind with SO_REUSEPORT (`thaw serve --reuse-http-port`)
  --head-timeout-s S  a request head must be complete S s after the accept or the first byte
                      after an idle spell, else 408 and closed (0: no limit; default 10)
  --idle-timeout-s S  a kept-alive connection with no request is closed after S s (0: never;
                      default 75)
  --max-connections N past N open connections a new one is answered 503 (0: no cap; default
                      10000)
  --control-fd N      an inherited AF_UNIX SOCK_SEQPACKET socket from `thaw serve`: the stubs'
                      relays and the versions the front answers itself (decision 0032 phase 2)
  --grpc-listen HOST:PORT  also listen for gRPC (HTTP/2, prior knowledge) there, forwarding
                      every call to the Python gRPC server on the Unix socket --grpc-upstream
                      names, but the hot versions' ModelInfer, answered here (phase 3); prints
                      `THAW_FRONT_GRPC HOST:PORT` before its listening line
  --grpc-reuse-port   bind the gRPC port with SO_REUSEPORT (`--reuse-grpc-port`)";

#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub listen: SocketAddr,
    pub upstream: PathBuf,
    pub reuse_port: bool,
    pub head_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub max_connections: usize,
    pub control_fd: Option<i32>,
    pub grpc_listen: Option<SocketAddr>,
    pub grpc_upstream: Option<PathBuf>,
    pub grpc_reuse_port: bool,
}

fn seconds(flag: &str, text: &str) -> Result<Option<Duration>, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{flag} {text:?} is not a number of seconds"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{flag} {text:?} must be 0 (off) or more"));
    }
    Ok((value > 0.0).then(|| Duration::from_secs_f64(value)))
}

/// The arguments after the program's name, or what is wrong with them.
pub fn parse(argv: &[String]) -> Result<Args, String> {
    let (mut listen, mut upstream) = (None, None);
    let mut args = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        upstream: PathBuf::new(),
        reuse_port: false,
        head_timeout: Some(Duration::from_secs(10)),
        idle_timeout: Some(Duration::from_secs(75)),
        max_connections: 10_000,
        control_fd: None,
        grpc_listen: None,
        grpc_upstream: None,
        grpc_reuse_port: false,
    };
    let mut words = argv.iter();
    while let Some(flag) = words.next() {
        if flag == "--reuse-port" {
            args.reuse_port = true;
            continue;
        }
        if flag == "--grpc-reuse-port" {
            args.grpc_reuse_port = true;
            continue;
        }
        let value = words
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => {
                listen = Some(
                    value
                        .parse::<SocketAddr>()
                        .map_err(|_| format!("--listen {value:?} is not HOST:PORT"))?,
                )
            }
            "--upstream" => upstream = Some(PathBuf::from(value)),
            "--grpc-listen" => {
                args.grpc_listen = Some(
                    value
                        .parse::<SocketAddr>()
                        .map_err(|_| format!("--grpc-listen {value:?} is not HOST:PORT"))?,
                )
            }
            "--grpc-upstream" => args.grpc_upstream = Some(PathBuf::from(value)),
            "--head-timeout-s" => args.head_timeout = seconds(flag, value)?,
            "--idle-timeout-s" => args.idle_timeout = seconds(flag, value)?,
            "--max-connections" => {
                args.max_connections = value
                    .parse()
                    .map_err(|_| format!("--max-connections {value:?} is not a count"))?
            }
            "--control-fd" => {
                args.control_fd = Some(
                    value
                        .parse::<i32>()
                        .ok()
                        .filter(|fd| *fd >= 0)
                        .ok_or_else(|| format!("--control-fd {value:?} is not a descriptor"))?,
                )
            }
            _ => return Err(format!("unknown flag {flag:?}")),
        }
    }
    args.listen = listen.ok_or("--listen is required")?;
    args.upstream = upstream.ok_or("--upstream is required")?;
    if args.grpc_listen.is_some() != args.grpc_upstream.is_some() {
        return Err("--grpc-listen and --grpc-upstream go together".into());
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn reads_every_flag() {
        let args = parse(&words(
            "--listen [::1]:8000 --upstream /tmp/s --reuse-port --head-timeout-s 0.5 --idle-timeout-s 0",
        ))
        .unwrap();
        assert_eq!(args.listen, "[::1]:8000".parse().unwrap());
        assert_eq!(args.upstream, PathBuf::from("/tmp/s"));
        assert!(args.reuse_port);
        assert_eq!(args.head_timeout, Some(Duration::from_millis(500)));
        assert_eq!(args.idle_timeout, None);
        assert_eq!(args.control_fd, None);
        let args = parse(&words("--listen 127.0.0.1:1 --upstream /s --control-fd 5")).unwrap();
        assert_eq!(args.control_fd, Some(5));
        assert!(parse(&words("--listen 127.0.0.1:1 --upstream /s --control-fd x")).is_err());
        let args = parse(&words(
            "--listen 127.0.0.1:1 --upstream /s --grpc-listen 0.0.0.0:2 --grpc-upstream /g --grpc-reuse-port",
        ))
        .unwrap();
        assert_eq!(args.grpc_listen, Some("0.0.0.0:2".parse().unwrap()));
        assert_eq!(args.grpc_upstream, Some(PathBuf::from("/g")));
        assert!(args.grpc_reuse_port);
        assert!(parse(&words(
            "--listen 127.0.0.1:1 --upstream /s --grpc-listen 0.0.0.0:2"
        ))
        .is_err());
    }

    #[test]
    fn says_what_is_wrong() {
        assert_eq!(
            parse(&words("--upstream /s")).unwrap_err(),
            "--listen is required"
        );
        assert!(parse(&words("--listen nowhere --upstream /s"))
            .unwrap_err()
            .contains("HOST:PORT"));
        assert!(parse(&words(
            "--listen 127.0.0.1:1 --upstream /s --idle-timeout-s -1"
        ))
        .unwrap_err()
        .contains("0 (off) or more"));
        assert!(parse(&words("--listen 127.0.0.1:1 --upstream"))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse(&words("--bogus 1"))
            .unwrap_err()
            .contains("unknown flag"));
    }
}
