//! kube-apiserver's audit log as the tests read it (tests/controlplane writes one, Metadata level,
//! for DRA's objects and Nodes): each request one user made and the answer the server gave, as
//! the server saw them. Tests count a client's writes here, not with the client's own counters.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request, at the stage it reached (`ResponseComplete`, or `ResponseStarted` for a watch).
#[derive(Debug, Clone)]
pub struct Event {
    pub verb: String,
    pub resource: String,
    pub name: String,
    pub code: u16,
    pub stage: String,
    pub uri: String,
    /// When the stage was reached, in seconds since the Unix epoch.
    pub at: f64,
}

impl Event {
    /// A completed write (create, update, patch, delete), whatever its answer.
    pub fn is_write(&self) -> bool {
        self.stage == "ResponseComplete"
            && matches!(
                self.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
    }

    /// A completed request, whatever its answer (a watch counts when it ends).
    pub fn is_complete(&self) -> bool {
        self.stage == "ResponseComplete"
    }

    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The value of query parameter `name`, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        let query = self.uri.split_once('?')?.1;
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| decode(v))
        })
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// RFC 3339 UTC (`2026-12-02T00:05:12.345678Z`, as the audit log writes it) in epoch seconds.
fn epoch_seconds(ts: &str) -> f64 {
    let parse = |r: std::ops::Range<usize>| -> i64 { ts[r].parse().expect("a timestamp") };
    let (y, m, d) = (parse(0..4), parse(5..7), parse(8..10));
    // Days from civil (H. Hinnant), for a date after 1970.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let seconds: f64 = ts[17..ts.len() - 1].parse().expect("seconds");
    (days * 86_400 + parse(11..13) * 3600 + parse(14..16) * 60) as f64 + seconds
}

/// Whether the byte before `offset` in the file at `path` ends a line.
fn ends_a_line(path: &Path, offset: u64) -> bool {
    let mut byte = [0u8];
    std::fs::File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(offset - 1))?;
            f.read_exact(&mut byte)
        })
        .is_ok_and(|()| byte[0] == b'\n')
}

/// The requests of one user from the moment this was made, read as the log grows.
pub struct Audit {
    path: PathBuf,
    user: String,
    state: Mutex<Tail>,
}

struct Tail {
    offset: u64,
    /// Whether `offset` may fall inside a line: the log is followed from
    /// its end at that moment, which can be in the middle of an event the
    /// server is still writing; that event's rest is not ours to read.
    mid_line: bool,
    partial: Vec<u8>,
    events: Vec<Event>,
}

impl Audit {
    /// Follows `user`'s requests in the log at `path`, from its current end.
    pub fn follow(path: PathBuf, user: &str) -> Audit {
        let offset = std::fs::metadata(&path).map_or(0, |m| m.len());
        let mid_line = offset > 0 && !ends_a_line(&path, offset);
        Audit {
            path,
            user: user.to_string(),
            state: Mutex::new(Tail {
                offset,
                mid_line,
                partial: Vec::new(),
                events: Vec::new(),
            }),
        }
    }

    /// Every event of the user so far.
    pub fn events(&self) -> Vec<Event> {
        let mut tail = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = std::fs::File::open(&self.path).expect("open the audit log");
        file.seek(SeekFrom::Start(tail.offset)).unwrap();
        let mut bytes = std::mem::take(&mut tail.partial);
        let read = file.read_to_end(&mut bytes).expect("read the audit log");
        tail.offset += read as u64;
        if tail.mid_line {
            // The rest of the event that was being written when this began.
            match bytes.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    bytes.drain(..=end);
                    tail.mid_line = false;
                }
                None => bytes.clear(),
            }
        }
        // A line still being written is kept for the next read.
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        tail.partial = bytes.split_off(complete);
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(line).expect("an audit event");
            let user = v["impersonatedUser"]["username"]
                .as_str()
                .or(v["user"]["username"].as_str());
            if user != Some(self.user.as_str()) {
                continue;
            }
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            tail.events.push(Event {
                verb: text(&v["verb"]),
                resource: text(&v["objectRef"]["resource"]),
                name: text(&v["objectRef"]["name"]),
                code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                stage: text(&v["stage"]),
                uri: text(&v["requestURI"]),
                at: epoch_seconds(v["stageTimestamp"].as_str().expect("stageTimestamp")),
            });
        }
        tail.events.clone()
    }

    /// A mark for [`Self::since`]: how many events there are now.
    pub fn mark(&self) -> usize {
        self.events().len()
    }

    /// The events after `mark`.
    pub fn since(&self, mark: usize) -> Vec<Event> {
        self.events().split_off(mark)
    }

    /// Polls until `cond` holds on the events so far.
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut cond: impl FnMut(&[Event]) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if cond(&self.events()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_and_queries_read_as_the_server_writes_them() {
        assert_eq!(
            super::epoch_seconds("1970-01-02T00:00:01.500000Z"),
            86_401.5
        );
        assert_eq!(
            super::epoch_seconds("2026-12-02T00:00:39.000000Z"),
            1_796_169_639.0
        );
        assert_eq!(
            super::decode("spec.nodeName%3Dn1%2Cspec.driver%3Dmedia.liken.sh"),
            "spec.nodeName=n1,spec.driver=media.liken.sh"
        );
    }
}
