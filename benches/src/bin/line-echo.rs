//! The pipe floor of the MCP benches: a minimal JSON-RPC server in plain
//! blocking std I/O that answers each request line with a fixed result
//! (`initialize` with a server description), echoing its id. It parses no
//! JSON; what it costs is the pipes and the client.

use std::io::{BufRead, Write};

fn id_of(line: &str) -> Option<&str> {
    let start = line.find("\"id\":")? + 5;
    let rest = line[start..].trim_start();
    let end = rest.find([',', '}'])?;
    Some(rest[..end].trim_end())
}

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    for line in stdin.lines() {
        let line = line?;
        let Some(id) = id_of(&line) else { continue };
        if line.contains("\"initialize\"") {
            writeln!(
                out,
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-06-18","capabilities":{{}},"serverInfo":{{"name":"line-echo","version":"0"}}}}}}"#
            )?;
        } else {
            writeln!(out, r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)?;
        }
        out.flush()?;
    }
    Ok(())
}
