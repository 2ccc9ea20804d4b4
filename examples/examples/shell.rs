//! The smallest useful embedding of `dsh-shell-persistent`: a pool, one
//! owner, a few calls that show state persisting.
//!
//! ```text
//! cargo run --example shell
//! ```
#![allow(clippy::print_stdout)]

use dsh_shell_persistent::{ShellConfig, ShellPool};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir()))?;
    for command in [
        "cd / && export GREETING=hello",
        "echo \"$GREETING from $PWD\"",
        "ls /nonexistent",
    ] {
        println!("$ {command}");
        println!("{}\n", pool.run("agent-1", command).await?);
    }
    pool.close_all().await;
    Ok(())
}
