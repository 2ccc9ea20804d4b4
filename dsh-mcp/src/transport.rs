//! Stdio with a guard in front of the MCP service: a line that is not JSON
//! gets a JSON-RPC parse error (-32700) instead of being dropped silently.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

const PARSE_ERROR: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not valid JSON"}}"#;

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
        let mut reader = BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let body = line.trim_ascii();
            if body.is_empty() {
                continue;
            }
            if serde_json::from_slice::<serde_json::Value>(body).is_err() {
                if errors.send(PARSE_ERROR.as_bytes().to_vec()).await.is_err() {
                    break;
                }
                continue;
            }
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
