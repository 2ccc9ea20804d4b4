//! The two tools an agent lives in, end to end, with nothing to configure:
//! a temporary workspace, a persistent bash shell whose state carries over
//! from call to call, and `str_replace_editor` editing a file in it.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```
#![allow(clippy::print_stdout)]

use dsh_editor::{Editor, fs::LocalFs};
use dsh_shell_persistent::{ShellConfig, ShellPool, contract};
use serde_json::{Value, json};

fn show(tool: &str, args: &Value, result: &Result<String, String>) {
    println!("── {tool} {args}");
    match result {
        Ok(text) if text.is_empty() => println!("(no output)"),
        Ok(text) => println!("{text}"),
        Err(text) => println!("(error) {text}"),
    }
    println!();
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = tempfile::tempdir()?;
    let root = std::fs::canonicalize(workspace.path())?;
    println!("workspace: {}\n", root.display());

    let shell = ShellPool::new(ShellConfig::new(&root))?;
    let editor = Editor::new(LocalFs::new());

    let bash_calls = [
        "mkdir -p app && cd app && export GREETING=hello",
        "greet() { echo \"$GREETING, $1 (from $PWD)\"; }",
        "greet world",
        "ls does-not-exist",
    ];
    for command in bash_calls {
        let args = json!({"command": command});
        let result = shell
            .execute("quickstart", &args)
            .await
            .map_err(|e| contract::render_error(&e));
        show("bash", &args, &result);
    }

    let file = root.join("app/hello.py");
    let path = file.to_str().ok_or("non-UTF-8 temp path")?;
    let editor_calls = [
        json!({"command": "create", "path": path, "file_text": "def main():\n\tprint('hello')\n"}),
        json!({"command": "str_replace", "path": path, "old_str": "'hello'", "new_str": "'hello, world'"}),
        json!({"command": "insert", "path": path, "insert_line": 2, "new_str": "\nif __name__ == '__main__':\n\tmain()"}),
        json!({"command": "view", "path": path}),
        json!({"command": "str_replace", "path": path, "old_str": "goodbye", "new_str": "x"}),
    ];
    for args in editor_calls {
        let result = editor
            .execute(&args)
            .await
            .map_err(|e| dsh_editor::contract::render_error(&e));
        show("str_replace_editor", &args, &result);
    }

    let args = json!({"command": "python3 hello.py 2>/dev/null || cat hello.py"});
    let result = shell
        .execute("quickstart", &args)
        .await
        .map_err(|e| contract::render_error(&e));
    show("bash", &args, &result);

    shell.close_all().await;
    Ok(())
}
