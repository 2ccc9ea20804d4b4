//! A host that replays tool calls the way an agent loop would: the model's
//! JSON arguments in, the exact text for the model out, and the typed
//! outcome for the host's own bookkeeping.
#![allow(clippy::print_stdout)]

use dsh_editor::{Editor, EditorOutcome, EditorRequest, fs::LocalFs};
use dsh_shell_persistent::serde_json::json;
use dsh_shell_persistent::{CallEnd, ShellConfig, ShellPool, contract};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = std::env::temp_dir().join(format!("downstream-{}", std::process::id()));
    std::fs::create_dir_all(&workspace)?;
    let pool = ShellPool::new(ShellConfig::new(&workspace))?;
    let editor = Editor::new(LocalFs::new());

    // What a model sees, and the three tool-definition shapes.
    println!("{}", pool.spec().anthropic());
    println!("{}", editor.spec().mcp()["name"]);

    // JSON in, text out.
    let text = pool
        .execute(
            "agent",
            &json!({"command": "printf 'x = 1\\n' > conf.py && ls"}),
        )
        .await?;
    println!("bash: {text}");

    // Typed: the host decides from data, renders for the model.
    let outcome = pool.call("agent", "grep -c x conf.py; false", std::future::pending()).await?;
    if let CallEnd::Exited { code } = outcome.end {
        println!(
            "exit code {code}; model sees:\n{}",
            contract::render(&outcome)
        );
    }
    let path = workspace.join("conf.py").display().to_string();
    let edited = editor
        .call(EditorRequest::str_replace(&path, "x = 1", "x = 2"))
        .await?;
    if let EditorOutcome::Edited { path } = &edited {
        println!("edited {path}: {}", dsh_editor::contract::render(&edited));
    }
    pool.close_all().await;
    std::fs::remove_dir_all(&workspace)?;
    Ok(())
}
