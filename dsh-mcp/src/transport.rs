//! Stdio with a guard in front of the MCP service: a line that is not JSON
//! gets a JSON-RPC parse error (-32700), valid JSON that is not a JSON-RPC
//! message gets an invalid-request error (-32600), and a line longer than
//! [`MAX_LINE`] is answered with -32600 and skipped without being buffered,
//! instead of any of them being dropped silently.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The longest line (one JSON-RPC message) the server reads.
pub const MAX_LINE: usize = 64 << 20;

const PARSE_ERROR: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not valid JSON"}}"#;

/// Why a JSON value is not a JSON-RPC 2.0 message, if it is not.
fn invalid_request(message: &Value) -> Option<&'static str> {
    let Some(object) = message.as_object() else {
        return Some("a message must be a JSON object (batches are not supported)");
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some("\"jsonrpc\" must be \"2.0\"");
    }
    if let Some(id) = object.get("id")
        && !(id.is_string() || id.is_number() || id.is_null())
    {
        return Some("\"id\" must be a string or a number");
    }
    match object.get("method") {
        Some(method) if !method.is_string() => Some("\"method\" must be a string"),
        Some(_) => None,
        // A response to a request of the server (elicitation).
        None if object.contains_key("id")
            && (object.contains_key("result") || object.contains_key("error")) =>
        {
            None
        }
        None => Some("a request needs a \"method\""),
    }
}

/// The error line answering an invalid request.
fn invalid_request_error(id: &Value, why: &str) -> Vec<u8> {
    let id = if id.is_string() || id.is_number() {
        id.clone()
    } else {
        Value::Null
    };
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": format!("Invalid request: {why}")}})
        .to_string()
        .into_bytes()
}

/// Reads one line into `line` (without its newline), at most [`MAX_LINE`]
/// bytes of it: `Ok(None)` at the end of input, `Ok(Some(false))` for a
/// line that was too long (its rest is skipped, not kept).
async fn read_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if line.is_empty() && !too_long {
                None
            } else {
                Some(!too_long)
            });
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long && line.len() + chunk.len() <= MAX_LINE {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line.clear();
        }
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(!too_long));
        }
    }
}

/// Connects `input`/`output` (the process's stdin and stdout) to the returned
/// pair, which the MCP service uses as its transport. Lines that are not
/// JSON are answered with a parse error here; everything else passes through.
pub fn guarded<R, W>(input: R, output: W) -> (DuplexStream, DuplexStream)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (service_in, mut to_service) = tokio::io::duplex(256 * 1024);
    let (from_service, service_out) = tokio::io::duplex(256 * 1024);
    let (lines_tx, mut lines_rx) = mpsc::channel::<Vec<u8>>(64);

    // stdin → service, answering non-JSON lines.
    let errors = lines_tx.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(64 << 10, input);
        let mut line = Vec::new();
        loop {
            let answer = match read_line(&mut reader, &mut line).await {
                Ok(None) | Err(_) => break,
                Ok(Some(false)) => Some(invalid_request_error(
                    &Value::Null,
                    "the line is longer than 64 MiB",
                )),
                Ok(Some(true)) => {
                    let body = line.trim_ascii();
                    if body.is_empty() {
                        continue;
                    }
                    match serde_json::from_slice::<Value>(body) {
                        Err(_) => Some(PARSE_ERROR.as_bytes().to_vec()),
                        Ok(message) => invalid_request(&message).map(|why| {
                            invalid_request_error(message.get("id").unwrap_or(&Value::Null), why)
                        }),
                    }
                }
            };
            if let Some(answer) = answer {
                if errors.send(answer).await.is_err() {
                    break;
                }
                continue;
            }
            let body = line.trim_ascii();
            if to_service.write_all(body).await.is_err()
                || to_service.write_all(b"\n").await.is_err()
            {
                break;
            }
        }
        // Dropping `to_service` is the service's end-of-input.
    });

    // service → stdout, line by line, interleaved with parse errors.
    tokio::spawn(async move {
        let mut reader = BufReader::new(from_service);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let trimmed = line.trim_ascii_end().to_vec();
                    if lines_tx.send(trimmed).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        let mut output = output;
        while let Some(line) = lines_rx.recv().await {
            let written = async {
                output.write_all(&line).await?;
                output.write_all(b"\n").await?;
                output.flush().await
            };
            if written.await.is_err() {
                break;
            }
        }
    });
    (service_in, service_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_from_what_is_not_one() {
        for ok in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": "a", "result": {}}),
        ] {
            assert_eq!(invalid_request(&ok), None, "{ok}");
        }
        for bad in [
            json!({"jsonrpc": "2.0", "id": 77, "method": 5}),
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
            json!({"id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": {}, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1}),
            json!(3),
        ] {
            assert!(invalid_request(&bad).is_some(), "{bad}");
        }
        let answer: Value =
            serde_json::from_slice(&invalid_request_error(&json!(77), "x")).unwrap();
        assert_eq!(answer["id"], 77);
        assert_eq!(answer["error"]["code"], -32600);
    }
}
