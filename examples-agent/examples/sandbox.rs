//! The smallest useful embedding of `dsh-sandbox`: the shell tool in
//! `workspace-write` mode — one persistent confined shell that keeps its
//! state between calls, where a write outside the workspace is stopped by
//! the kernel and reported to the model.
//!
//! ```text
//! cargo run --example sandbox
//! ```
#![allow(clippy::print_stdout)]

use dsh_sandbox::{
    ModeChange, Persistence, SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell, contract,
};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = tempfile::tempdir()?;
    let policy = SandboxPolicy::default()
        .mode(SandboxMode::WorkspaceWrite)
        .tmp_writable(false);
    let shell = SandboxedShell::new(
        SandboxConfig::new(policy, ShellConfig::new(workspace.path()))
            .mode_change(ModeChange::Reject)
            .restricted(Persistence::Persistent),
    )?;
    println!(
        "enforced: {:?}\n",
        shell.enforcement(SandboxMode::WorkspaceWrite)
    );
    for command in [
        "mkdir -p src && cd src && export STAGE=dev",
        "echo $STAGE $(basename $PWD)",
        "echo inside > notes.txt && cat notes.txt",
        "echo outside > /etc/dsh-demo",
    ] {
        println!("$ {command}");
        match shell.execute("agent", &json!({ "command": command })).await {
            Ok(text) => println!("{text}\n"),
            Err(err) => println!("(error) {}\n", contract::render_error(&err)),
        }
    }
    shell.close_all().await;
    Ok(())
}
