//! The shell and the editor used from outside the workspace, through their
//! typed outcomes, against real bash and real files.

use std::time::Duration;

use dsh_editor::{Editor, EditorConfig, EditorOutcome, EditorRequest, fs::LocalFs};
use dsh_shell_persistent::serde_json::json;
use dsh_shell_persistent::{CallEnd, Clip, ClipMode, ShellConfig, ShellError, ShellPool, contract};

fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

#[tokio::test]
async fn shell_outcomes_are_data_and_render_to_the_contract() {
    let (_dir, root) = workspace();
    let pool = ShellPool::new(
        ShellConfig::new(&root)
            .timeout(Duration::from_secs(3))
            .max_output_chars(100)
            .clip(ClipMode::HeadTail),
    )
    .unwrap();

    let ok = pool.call("a", "cd /tmp && echo hi", std::future::pending()).await.unwrap();
    assert!(ok.succeeded());
    assert_eq!(ok.output.text, "hi");
    assert!(!ok.shell_reset);

    let failed = pool
        .call("a", "echo $PWD; exit_code() { return 7; }; exit_code", std::future::pending())
        .await
        .unwrap();
    assert_eq!(failed.exit_code(), Some(7));
    assert_eq!(contract::render(&failed), "/tmp\n[exit code: 7]");

    let long = pool.call("a", "seq 1 1000", std::future::pending()).await.unwrap();
    match &long.output.clip {
        Some(Clip::HeadTail {
            omitted_chars,
            tail,
        }) => {
            assert!(long.output.text.starts_with("1\n2\n"));
            assert!(tail.ends_with("999\n1000"), "{tail}");
            assert!(*omitted_chars > 3000);
        }
        other => panic!("expected head+tail clipping, got {other:?}"),
    }

    let slow = pool.call("a", "echo partial; sleep 60", std::future::pending()).await.unwrap();
    assert!(matches!(slow.end, CallEnd::TimedOut { after } if after == Duration::from_secs(3)));
    assert!(slow.shell_reset);
    assert_eq!(slow.output.text, "partial");
    assert!(contract::render(&slow).starts_with("Your command timed out after 3 seconds"));

    // The reset shell starts from the workspace again.
    let fresh = pool.call("a", "pwd", std::future::pending()).await.unwrap();
    assert_eq!(fresh.output.text, root.display().to_string());

    // JSON in, text out, and a precise error for a bad call.
    let text = pool
        .execute("a", &json!({"command": "echo $((6 * 7))"}))
        .await
        .unwrap();
    assert_eq!(text, "42");
    let err = pool.execute("a", &json!({"cmd": "ls"})).await.unwrap_err();
    assert!(matches!(err, ShellError::EmptyCommand));
    assert_eq!(
        contract::render_error(&err),
        "command must be a non-empty string"
    );
    pool.close_all().await;
}

#[tokio::test]
async fn a_missing_workspace_is_refused_at_construction() {
    let (_dir, root) = workspace();
    let err = ShellPool::new(ShellConfig::new(root.join("nope"))).unwrap_err();
    assert!(err.to_string().contains("is not a directory"), "{err}");
}

#[tokio::test]
async fn editor_outcomes_are_data_and_render_to_the_contract() {
    let (_dir, root) = workspace();
    let editor = Editor::with_config(
        LocalFs::new(),
        EditorConfig::default().max_output_chars(400),
    )
    .unwrap();
    let path = root.join("notes.md").display().to_string();

    let created = editor
        .call(EditorRequest::create(&path, "# Notes\n\tindented\n"))
        .await
        .unwrap();
    assert_eq!(created, EditorOutcome::Created { path: path.clone() });
    assert_eq!(
        dsh_editor::contract::render(&created),
        format!("New file created successfully at: {path}")
    );

    let edited = editor
        .call(EditorRequest::insert(&path, 1, "added"))
        .await
        .unwrap();
    assert!(matches!(edited, EditorOutcome::Edited { .. }));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "# Notes\nadded\n\tindented\n"
    );

    let view = editor
        .call(EditorRequest::view_range(&path, 2, -1))
        .await
        .unwrap();
    let EditorOutcome::FileView(file) = &view else {
        panic!("expected a file view, got {view:?}")
    };
    assert_eq!(
        (file.total_lines, file.first_line, file.last_line),
        (4, 2, 4)
    );
    assert_eq!(
        file.numbered,
        "     2  added\n     3  \tindented\n     4  \n"
    );
    assert!(!file.is_clipped());
    // The same call as the model's JSON gives the rendered text.
    let text = editor
        .execute(&json!({"command": "view", "path": path, "view_range": [2, -1]}))
        .await
        .unwrap();
    assert_eq!(text, dsh_editor::contract::render(&view));

    let ambiguous = editor
        .call(EditorRequest::str_replace(&path, "d", "D"))
        .await
        .unwrap_err();
    assert!(
        dsh_editor::contract::render_error(&ambiguous).contains("Multiple occurrences"),
        "{ambiguous}"
    );

    for (shape, key) in [
        (editor.spec().openai(), "parameters"),
        (editor.spec().anthropic(), "input_schema"),
        (editor.spec().mcp(), "inputSchema"),
    ] {
        assert_eq!(shape["name"], "str_replace_editor");
        assert_eq!(shape[key]["required"], json!(["command", "path"]));
    }
}
