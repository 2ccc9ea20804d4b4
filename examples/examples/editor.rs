//! The smallest useful embedding of `dsh-editor`: the `str_replace_editor`
//! tool over an in-memory filesystem, driven with the JSON a model would send.
//!
//! ```text
//! cargo run --example editor
//! ```
#![allow(clippy::print_stdout)]

use dsh_editor::{Editor, contract, fs::MemFs};
use serde_json::{Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let editor = Editor::new(MemFs::new());
    let calls: [Value; 6] = [
        json!({"command": "create", "path": "/app/main.py", "file_text": "def main():\n\tprint('hello')\n"}),
        json!({"command": "str_replace", "path": "/app/main.py", "old_str": "'hello'", "new_str": "'hello, world'"}),
        json!({"command": "insert", "path": "/app/main.py", "insert_line": 2, "new_str": "\nmain()"}),
        json!({"command": "view", "path": "/app/main.py"}),
        json!({"command": "view", "path": "/app"}),
        json!({"command": "str_replace", "path": "/app/main.py", "old_str": "goodbye"}),
    ];
    for call in calls {
        println!(">>> {call}");
        match editor.execute(&call).await {
            Ok(text) => println!("{text}\n"),
            Err(err) => println!("error: {}\n", contract::render_error(&err)),
        }
    }
}
