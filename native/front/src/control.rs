//! The front's standard input, from its `thaw serve`: `stop DEADLINE_S IDLE_S` (one line) drains
//! and stops it; the end of the input (the server is gone, however it went) ends the front at
//! once, so a killed `thaw serve` never leaves its port held.

use std::io::BufRead;
use std::time::Duration;

use tokio::sync::mpsc;

#[derive(Debug, PartialEq)]
pub enum Command {
    /// Stop accepting; close connections idle for `idle`; exit by `deadline`.
    Stop { deadline: Duration, idle: Duration },
}

/// One line of the input: the command, or None for one the front does not know (ignored).
pub fn parse(line: &str) -> Option<Command> {
    let mut words = line.split_whitespace();
    if words.next()? != "stop" {
        return None;
    }
    let mut seconds = || -> Option<Duration> {
        let value: f64 = words.next()?.parse().ok()?;
        (value.is_finite() && value >= 0.0).then(|| Duration::from_secs_f64(value))
    };
    let deadline = seconds()?;
    let idle = seconds()?;
    Some(Command::Stop { deadline, idle })
}

/// The commands, read by a thread of their own (a blocking read of standard input); the
/// channel ends with the input.
pub fn commands() -> mpsc::UnboundedReceiver<Command> {
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match parse(&line) {
                Some(command) => {
                    if sender.send(command).is_err() {
                        return;
                    }
                }
                None => eprintln!("thaw-front: unknown command {line:?} ignored"),
            }
        }
        // The input ended: `thaw serve` is gone (or closed it). The channel closes with the
        // sender, and the front ends: nothing to drain for.
    });
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop() {
        assert_eq!(
            parse("stop 30 5"),
            Some(Command::Stop {
                deadline: Duration::from_secs(30),
                idle: Duration::from_secs(5)
            })
        );
        assert_eq!(parse("stop 30"), None);
        assert_eq!(parse("stop -1 5"), None);
        assert_eq!(parse("go"), None);
        assert_eq!(parse(""), None);
    }
}
