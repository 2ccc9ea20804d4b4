//! The session log: one JSON line per tool call, written as each call ends.
//!
//! Writing a line blocks (a `write` and a flush to a file, on a disk that
//! may be slow or full), so async code writes through
//! [`SessionLog::record_async`] and [`SessionLog::append_async`]: the line
//! is made on the caller's thread and written on tokio's blocking pool,
//! never on a runtime's worker, and the call returns once it is written.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// An append-only, uncompressed JSONL file of tool calls.
#[derive(Debug)]
pub struct SessionLog {
    path: Arc<Path>,
    /// Shared with the writes on tokio's blocking pool.
    file: Arc<Mutex<std::fs::File>>,
}

impl SessionLog {
    /// Creates `DIR/<UTC time>-<pid>.jsonl` (and `DIR`).
    pub fn create(dir: &Path) -> std::io::Result<SessionLog> {
        std::fs::create_dir_all(dir)?;
        let stamp = rfc3339(SystemTime::now()).replace([':', '.'], "-");
        let path = dir.join(format!("{stamp}-{}.jsonl", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        Ok(SessionLog {
            path: path.into(),
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one tool-call record (`ts`, `tool`, `arguments`, `result`,
    /// `is_error`, `duration_ms`). Blocks on the write: from async code,
    /// [`SessionLog::record_async`].
    pub fn record(
        &self,
        tool: &str,
        arguments: &Value,
        result: &str,
        is_error: bool,
        duration_ms: u64,
    ) {
        write(
            &self.file,
            &self.path,
            &tool_call(tool, arguments, result, is_error, duration_ms),
        );
    }

    /// [`SessionLog::record`], written on tokio's blocking pool; returns
    /// once the record is in the file.
    pub async fn record_async(
        &self,
        tool: &str,
        arguments: &Value,
        result: &str,
        is_error: bool,
        duration_ms: u64,
    ) {
        self.write_off_runtime(tool_call(tool, arguments, result, is_error, duration_ms))
            .await;
    }

    /// Appends one JSON value as a line and flushes it, so a crash loses at
    /// most the record being written. An object without a `ts` gets one:
    /// the time of the call, as an RFC 3339 UTC timestamp with
    /// milliseconds. Blocks on the write: from async code,
    /// [`SessionLog::append_async`].
    pub fn append(&self, line: &Value) {
        write(&self.file, &self.path, &stamped(line));
    }

    /// [`SessionLog::append`], written on tokio's blocking pool; returns
    /// once the line is in the file.
    pub async fn append_async(&self, line: &Value) {
        self.write_off_runtime(stamped(line)).await;
    }

    async fn write_off_runtime(&self, line: String) {
        let (file, path) = (Arc::clone(&self.file), Arc::clone(&self.path));
        if let Err(err) = tokio::task::spawn_blocking(move || write(&file, &path, &line)).await {
            tracing::warn!(path = %self.path.display(), %err, "a session log record was not written");
        }
    }
}

/// One tool-call record, as its line.
fn tool_call(
    tool: &str,
    arguments: &Value,
    result: &str,
    is_error: bool,
    duration_ms: u64,
) -> String {
    json!({
        "ts": rfc3339(SystemTime::now()),
        "tool": tool,
        "arguments": arguments,
        "result": result,
        "is_error": is_error,
        "duration_ms": duration_ms,
    })
    .to_string()
}

/// `line` as its line, with a `ts` first if it is an object without one.
fn stamped(line: &Value) -> String {
    if let Some(record) = line.as_object()
        && !record.contains_key("ts")
    {
        let mut stamped = serde_json::Map::with_capacity(record.len() + 1);
        stamped.insert("ts".into(), rfc3339(SystemTime::now()).into());
        stamped.extend(record.iter().map(|(k, v)| (k.clone(), v.clone())));
        return Value::Object(stamped).to_string();
    }
    line.to_string()
}

/// Writes `line` and a newline, and flushes.
fn write(file: &Mutex<std::fs::File>, path: &Path, line: &str) {
    let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
    let written = writeln!(file, "{line}").and_then(|()| file.flush());
    if let Err(err) = written {
        tracing::warn!(path = %path.display(), %err, "writing the session log failed");
    }
}

/// `t` as an RFC 3339 UTC timestamp with milliseconds.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_998_245_123);
        assert_eq!(rfc3339(t), "2026-11-30T00:24:05.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }
}
