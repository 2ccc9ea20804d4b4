//! Starts bash in a pseudo-terminal through `dsh-pty`, runs one command, and
//! prints its output and the shell's exit status.
//!
//! ```text
//! cargo run --release --example pty
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use dsh_pty::{SpawnSpec, default_backend};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = default_backend();
    println!("backend: {}", backend.name());
    let spec = SpawnSpec::new("bash")
        .args(["--norc", "--noprofile", "--noediting"])
        .env("TERM", "dumb")
        .env("PS1", "")
        .echo(false);
    let mut session = backend.spawn(spec).await?;
    let mut output = session.take_output().ok_or("output already taken")?;

    let command = "uname -s; echo \"bash $BASH_VERSION in $PWD\"; exit 3";
    println!("$ {command}");
    session.write_all(format!("{command}\n").as_bytes()).await?;

    let mut raw = Vec::new();
    let collect = async {
        while let Some(chunk) = output.recv().await {
            raw.extend_from_slice(&chunk);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), collect).await?;
    print!("{}", String::from_utf8_lossy(&raw).replace("\r\n", "\n"));
    let status = session.wait().await;
    println!("[{status}]");
    Ok(())
}
