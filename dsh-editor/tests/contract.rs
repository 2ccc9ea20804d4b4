//! The model-visible contract, on the real filesystem, in memory, and
//! (ignored unless run with `--ignored`, as `.ci/run` does) inside a Docker
//! container through `DockerFs`, with the same assertions.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use dsh_editor::fs::{Fs, MemFs};
use dsh_editor::{Editor, EditorConfig, VIEW_CLIP_NOTE as CLIP_NOTE};
use dsh_testbeds::{Testbed, Where};
use serde_json::{Value, json};

/// Which filesystem a fixture edits.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// `LocalFs` in a temporary directory.
    Local,
    /// `MemFs`.
    Mem,
    /// `DockerFs` in a container of the local daemon.
    Docker,
    /// `SftpFs` over SSH to this machine.
    Ssh,
}

/// An editor over one filesystem, rooted at a directory of its own.
struct Fixture {
    editor: Editor<Arc<dyn Fs>>,
    root: String,
    mem: Option<Arc<MemFs>>,
    bed: Option<Testbed>,
    name: &'static str,
}

impl Fixture {
    async fn at(place: Place) -> Fixture {
        Fixture::at_with(place, EditorConfig::default()).await
    }

    async fn at_with(place: Place, config: EditorConfig) -> Fixture {
        let bed = match place {
            Place::Mem => None,
            Place::Local => Some(Testbed::new(Where::Local).await),
            Place::Docker => Some(Testbed::new(Where::Docker).await),
            Place::Ssh => Some(Testbed::new(Where::Ssh).await),
        };
        match bed {
            Some(bed) => Fixture {
                editor: Editor::with_config(Arc::clone(&bed.fs), config).unwrap(),
                root: bed.root.clone(),
                mem: None,
                name: if matches!(place, Place::Local) {
                    "LocalFs"
                } else {
                    "DockerFs"
                },
                bed: Some(bed),
            },
            None => {
                let mem = Arc::new(MemFs::new());
                mem.mkdir(Path::new("/work"));
                Fixture {
                    editor: Editor::with_config(Arc::clone(&mem) as Arc<dyn Fs>, config).unwrap(),
                    root: "/work".into(),
                    mem: Some(mem),
                    bed: None,
                    name: "MemFs",
                }
            }
        }
    }

    async fn local_with(config: EditorConfig) -> Fixture {
        Fixture::at_with(Place::Local, config).await
    }

    fn path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    async fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> String {
        match (&self.mem, &self.bed) {
            (Some(mem), _) => mem.put(Path::new(&self.path(rel)), bytes.as_ref()),
            (None, Some(bed)) => bed.put(rel, bytes).await,
            (None, None) => unreachable!("a fixture has a filesystem"),
        }
        self.path(rel)
    }

    async fn mkdir(&self, rel: &str) -> String {
        match (&self.mem, &self.bed) {
            (Some(mem), _) => mem.mkdir(Path::new(&self.path(rel))),
            (None, Some(bed)) => bed.mkdir(rel).await,
            (None, None) => unreachable!("a fixture has a filesystem"),
        }
        self.path(rel)
    }

    async fn read(&self, path: &str) -> Vec<u8> {
        match &self.mem {
            Some(mem) => mem.get(Path::new(path)).unwrap(),
            None => {
                self.editor
                    .fs()
                    .read(Path::new(path), u64::MAX)
                    .await
                    .unwrap()
                    .0
            }
        }
    }

    fn name(&self) -> &'static str {
        self.name
    }

    async fn ok(&self, args: Value) -> String {
        match self.editor.execute(&args).await {
            Ok(text) => text,
            Err(e) => panic!("{}: {args} failed: {e}", self.name()),
        }
    }

    async fn err(&self, args: Value) -> String {
        match self.editor.execute(&args).await {
            Ok(text) => panic!("{}: {args} succeeded: {text}", self.name()),
            Err(e) => dsh_editor::contract::render_error(&e),
        }
    }
}

/// Each test, once per filesystem: `local::` and `mem::` run everywhere,
/// `docker::` where a Docker daemon and the test image are.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod local {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Place::Local).await
                }
            )*
        }
        mod mem {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Place::Mem).await
                }
            )*
        }
        mod docker {
            $(
                #[tokio::test]
                #[ignore = "needs a Docker daemon and the dsh-test image (.ci/run starts and imports both)"]
                async fn $name() {
                    super::$name(super::Place::Docker).await
                }
            )*
        }
        mod ssh {
            $(
                #[tokio::test]
                #[ignore = "needs sshd (.ci/engines installs it; each test starts its own)"]
                async fn $name() {
                    super::$name(super::Place::Ssh).await
                }
            )*
        }
    };
}

async fn path_errors(place: Place) {
    for f in [Fixture::at(place).await] {
        assert_eq!(
            f.err(json!({"command": "view", "path": "src/main.rs"}))
                .await,
            "The path src/main.rs is not an absolute path, it should start with `/`. Maybe you meant /src/main.rs?"
        );
        let missing = f.path("nope.txt");
        assert_eq!(
            f.err(json!({"command": "view", "path": missing})).await,
            format!("The path {missing} does not exist. Please provide a valid path.")
        );
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": missing, "old_str": "a"}))
                .await,
            format!("The path {missing} does not exist. Please provide a valid path.")
        );
        let dir = f.mkdir("d").await;
        for args in [
            json!({"command": "str_replace", "path": dir, "old_str": "a", "new_str": "b"}),
            json!({"command": "insert", "path": dir, "insert_line": 0, "new_str": "b"}),
        ] {
            assert_eq!(
                f.err(args).await,
                format!(
                    "The path {dir} is a directory and only the `view` command can be used on directories"
                )
            );
        }
        assert_eq!(
            f.err(json!({"command": "view", "path": dir, "view_range": [1, 2]}))
                .await,
            "The `view_range` parameter is not allowed when `path` points to a directory."
        );
    }
}

async fn view_file_shows_every_line_as_it_is(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f.write("a.txt", "one\n\ttwo  \nthree\n").await;
        assert_eq!(
            f.ok(json!({"command": "view", "path": p})).await,
            format!(
                "Here's the content of {p} with line numbers (which has a total of 4 lines):\n     1  one\n     2  \ttwo  \n     3  three\n     4  \n"
            )
        );
        let empty = f.write("empty.txt", "").await;
        assert_eq!(
            f.ok(json!({"command": "view", "path": empty})).await,
            format!(
                "Here's the content of {empty} with line numbers (which has a total of 1 lines):\n     1  \n"
            )
        );
        assert_eq!(
            f.ok(json!({"command": "view", "path": p, "view_range": [2, 3]}))
                .await,
            format!(
                "Here's the content of {p} with line numbers (which has a total of 4 lines) with view_range=[2, 3]:\n     2  \ttwo  \n     3  three\n"
            )
        );
        assert_eq!(
            f.ok(json!({"command": "view", "path": p, "view_range": [3, -1]}))
                .await,
            format!(
                "Here's the content of {p} with line numbers (which has a total of 4 lines) with view_range=[3, -1]:\n     3  three\n     4  \n"
            )
        );
    }
}

async fn view_range_errors(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f.write("a.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9").await;
        let cases = [
            (json!([1]), "Invalid `view_range`. It should be a list of two integers.".to_owned()),
            (json!([1, "2"]), "Invalid `view_range`. It should be a list of two integers.".to_owned()),
            (json!("1,2"), "Invalid `view_range`. It should be a list of two integers.".to_owned()),
            (json!([0, 3]), "Invalid `view_range`: [0, 3]. Its first element `0` should be within the range of lines of the file: [1, 9]".to_owned()),
            (json!([10, 12]), "Invalid `view_range`: [10, 12]. Its first element `10` should be within the range of lines of the file: [1, 9]".to_owned()),
            (json!([2, 10]), "Invalid `view_range`: [2, 10]. Its second element `10` should be smaller than the number of lines in the file: `9`".to_owned()),
            (json!([5, 3]), "Invalid `view_range`: [5, 3]. Its second element `3` should be larger or equal than its first `5`".to_owned()),
            (json!([5, -2]), "Invalid `view_range`: [5, -2]. Its second element `-2` should be larger or equal than its first `5`".to_owned()),
        ];
        for (range, want) in cases {
            assert_eq!(
                f.err(json!({"command": "view", "path": p, "view_range": range}))
                    .await,
                want,
                "{}",
                f.name()
            );
        }
    }
}

async fn view_directory_two_levels_sorted_without_hidden(place: Place) {
    for f in [Fixture::at(place).await] {
        f.write("b.txt", "").await;
        f.write("a/x.rs", "").await;
        f.write("a/deep/too/far.txt", "").await;
        f.write("a-b", "").await;
        f.write(".git/config", "").await;
        f.write("node_modules/m/index.js", "").await;
        f.write("pkg/__pycache__/c.pyc", "").await;
        f.write("pkg/.hidden", "").await;
        f.write("with space/中文 🎉.md", "").await;
        let root = f.root.clone();
        let listing = f.ok(json!({"command": "view", "path": root})).await;
        assert_eq!(
            listing,
            format!(
                "Here're the files and directories up to 2 levels deep in {root}, excluding hidden items, node_modules, and Python cache directories:\n\
                 d\t{root}\n\
                 d\t{root}/a\n\
                 f\t{root}/a-b\n\
                 d\t{root}/a/deep\n\
                 f\t{root}/a/x.rs\n\
                 f\t{root}/b.txt\n\
                 d\t{root}/pkg\n\
                 d\t{root}/with space\n\
                 f\t{root}/with space/中文 🎉.md\n\
                 \n"
            ),
            "{}",
            f.name()
        );
        // A trailing slash names the same directory.
        let slashed = f
            .ok(json!({"command": "view", "path": format!("{root}/")}))
            .await;
        assert!(slashed.contains(&format!("d\t{root}/a\n")), "{slashed}");
    }
}

async fn create(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f.path("new/dir/file.txt");
        assert_eq!(
            f.err(json!({"command": "create", "path": p})).await,
            "Parameter `file_text` is required for command: create"
        );
        assert_eq!(
            f.ok(json!({"command": "create", "path": p, "file_text": "x\ty\n"}))
                .await,
            format!("New file created successfully at: {p}")
        );
        assert_eq!(f.read(&p).await, b"x\ty\n");
        assert_eq!(
            f.err(json!({"command": "create", "path": p, "file_text": "other"}))
                .await,
            format!("File already exists at: {p}. Cannot overwrite files using command `create`.")
        );
        assert_eq!(f.read(&p).await, b"x\ty\n");
        let empty = f.path("empty");
        f.ok(json!({"command": "create", "path": empty, "file_text": ""}))
            .await;
        assert_eq!(f.read(&empty).await, b"");
    }
}

async fn str_replace(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f.write("s.py", "def f():\n\treturn 1  \n# end").await;
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": p})).await,
            "Parameter `old_str` is required for command: str_replace"
        );
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": p, "old_str": ""}))
                .await,
            "Parameter `old_str` is empty for command: str_replace"
        );
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": p, "old_str": "return 2"}))
                .await,
            format!(
                "No replacement was performed, old_str `return 2` did not appear verbatim in {p}."
            )
        );
        assert_eq!(
            f.ok(json!({"command": "str_replace", "path": p, "old_str": "\treturn 1", "new_str": "\treturn '$&\\\\1'"})).await,
            format!("The file {p} has been edited successfully.")
        );
        assert_eq!(f.read(&p).await, b"def f():\n\treturn '$&\\\\1'  \n# end");
        // new_str omitted deletes.
        f.ok(json!({"command": "str_replace", "path": p, "old_str": "\n# end"}))
            .await;
        assert_eq!(f.read(&p).await, b"def f():\n\treturn '$&\\\\1'  ");
    }
}

async fn ambiguity_lists_the_line_of_every_match(place: Place) {
    for f in [Fixture::at(place).await] {
        let block = "if x:\n    y()\n";
        let p = f
            .write(
                "dup.py",
                format!("start\n{block}mid\n\n{block}{block}end\n"),
            )
            .await;
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": p, "old_str": block, "new_str": ""}))
                .await,
            format!(
                "No replacement was performed. Multiple occurrences of old_str `{block}` in lines [2, 6, 8]. Please ensure it is unique"
            )
        );
        let p2 = f.write("aa.txt", "aaa\naa").await;
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": p2, "old_str": "aa"}))
                .await,
            "No replacement was performed. Multiple occurrences of old_str `aa` in lines [1, 2]. Please ensure it is unique"
        );
        // A match on every line of a long file: the first 200 lines are
        // listed, the rest counted, and the file is unchanged.
        let text = "x\n".repeat(100_000);
        let p3 = f.write("many.txt", &text).await;
        let lines: Vec<String> = (1..=200).map(|n| n.to_string()).collect();
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": p3, "old_str": "x", "new_str": "y"}))
                .await,
            format!(
                "No replacement was performed. Multiple occurrences of old_str `x` in lines [{}] and 99800 more. Please ensure it is unique",
                lines.join(", ")
            )
        );
        assert_eq!(f.read(&p3).await, text.as_bytes());
    }
}

async fn insert(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f.write("i.txt", "a\nb\nc\n").await;
        assert_eq!(
            f.err(json!({"command": "insert", "path": p, "new_str": "X"}))
                .await,
            "Parameter `insert_line` is required for command: insert"
        );
        assert_eq!(
            f.err(json!({"command": "insert", "path": p, "insert_line": 1}))
                .await,
            "Parameter `new_str` is required for command: insert"
        );
        for bad in [5, -1] {
            assert_eq!(
                f.err(json!({"command": "insert", "path": p, "insert_line": bad, "new_str": "X"}))
                    .await,
                format!(
                    "Invalid `insert_line` parameter: {bad}. It should be within the range of lines of the file: [0, 4]"
                )
            );
        }
        assert_eq!(
            f.ok(json!({"command": "insert", "path": p, "insert_line": 3, "new_str": "X"}))
                .await,
            format!("The file {p} has been edited successfully.")
        );
        assert_eq!(f.read(&p).await, b"a\nb\nc\nX\n");
        let q = f.write("j.txt", "a\nb\nc\n").await;
        f.ok(json!({"command": "insert", "path": q, "insert_line": 4, "insert_text": "X"}))
            .await;
        assert_eq!(f.read(&q).await, b"a\nb\nc\n\nX");
        f.ok(json!({"command": "insert", "path": q, "insert_line": 0, "new_str": "top\n"}))
            .await;
        assert_eq!(f.read(&q).await, b"top\n\na\nb\nc\n\nX");
    }
}

async fn crlf_files_stay_crlf(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f.write("w.txt", "one\r\ntwo\r\nthree\r\n").await;
        f.ok(json!({"command": "str_replace", "path": p, "old_str": "one\ntwo", "new_str": "1\n2\n2.5"})).await;
        assert_eq!(f.read(&p).await, b"1\r\n2\r\n2.5\r\nthree\r\n");
        f.ok(json!({"command": "insert", "path": p, "insert_line": 1, "new_str": "a\nb"}))
            .await;
        assert_eq!(f.read(&p).await, b"1\r\na\r\nb\r\n2\r\n2.5\r\nthree\r\n");
        // The model sees clean lines.
        let view = f
            .ok(json!({"command": "view", "path": p, "view_range": [1, 2]}))
            .await;
        assert!(view.ends_with("     1  1\n     2  a\n"), "{view:?}");
    }
}

async fn bom_whitespace_and_missing_final_newline_survive(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f.write("bom.txt", "\u{feff}alpha  \n\tbeta\t\ngamma").await;
        f.ok(json!({"command": "str_replace", "path": p, "old_str": "beta", "new_str": "BETA"}))
            .await;
        assert_eq!(
            f.read(&p).await,
            "\u{feff}alpha  \n\tBETA\t\ngamma".as_bytes()
        );
    }
}

async fn non_utf8_files_are_edited_losslessly_or_refused(place: Place) {
    for f in [Fixture::at(place).await] {
        // windows-1252: curly quotes and é.
        let p = f.write("latin.txt", b"caf\xe9 \x93x\x94\nline2\n").await;
        let view = f.ok(json!({"command": "view", "path": p})).await;
        assert!(view.contains("     1  café \u{201C}x\u{201D}\n"), "{view}");
        f.ok(
            json!({"command": "str_replace", "path": p, "old_str": "line2", "new_str": "ligne é"}),
        )
        .await;
        assert_eq!(f.read(&p).await, b"caf\xe9 \x93x\x94\nligne \xe9\n");
        let before = f.read(&p).await;
        assert_eq!(
            f.err(
                json!({"command": "str_replace", "path": p, "old_str": "ligne", "new_str": "行"})
            )
            .await,
            format!(
                "No edit was made: the file {p} is encoded as windows-1252, which cannot hold the character `行` (U+884C). Use only characters of that encoding, or convert the file first."
            )
        );
        assert_eq!(f.read(&p).await, before);

        // UTF-16LE with BOM.
        let mut utf16 = vec![0xFF, 0xFE];
        utf16.extend("hi\r\nthere\r\n".encode_utf16().flat_map(u16::to_le_bytes));
        let u = f.write("u16.txt", &utf16).await;
        f.ok(json!({"command": "str_replace", "path": u, "old_str": "there", "new_str": "wörld"}))
            .await;
        let mut want = vec![0xFF, 0xFE];
        want.extend("hi\r\nwörld\r\n".encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(f.read(&u).await, want);
    }
}

async fn binary_files_are_not_dumped_or_edited(place: Place) {
    for f in [Fixture::at(place).await] {
        let bytes = b"\x7fELF\x00\x01binary\nstuff".to_vec();
        let p = f.write("bin", &bytes).await;
        let want = format!(
            "The file {p} appears to be binary (it contains NUL bytes); this tool only views and edits text files. Use the shell to inspect it, e.g. `xxd {p} | head`."
        );
        assert_eq!(f.err(json!({"command": "view", "path": p})).await, want);
        assert_eq!(
            f.err(json!({"command": "str_replace", "path": p, "old_str": "stuff", "new_str": "x"}))
                .await,
            want
        );
        assert_eq!(
            f.err(json!({"command": "insert", "path": p, "insert_line": 0, "new_str": "x"}))
                .await,
            want
        );
        assert_eq!(f.read(&p).await, bytes);
    }
}

async fn unicode_paths_and_content(place: Place) {
    for f in [Fixture::at(place).await] {
        let p = f
            .write("目录/ファイル 🎉.txt", "你好，世界\nemoji 🎉🎉\n")
            .await;
        f.ok(json!({"command": "str_replace", "path": p, "old_str": "世界", "new_str": "🌍"}))
            .await;
        assert_eq!(f.read(&p).await, "你好，🌍\nemoji 🎉🎉\n".as_bytes());
        let view = f.ok(json!({"command": "view", "path": p})).await;
        assert!(view.contains("     1  你好，🌍\n"), "{view}");
    }
}

async fn long_output_is_clipped_with_the_note(place: Place) {
    for f in [Fixture::at(place).await] {
        let text: String = (1..=16_000).map(|i| format!("line {i}\n")).collect();
        let p = f.write("long.txt", &text).await;
        let out = f.ok(json!({"command": "view", "path": p})).await;
        assert!(out.ends_with(CLIP_NOTE), "{}", &out[out.len() - 300..]);
        assert_eq!(out.chars().count(), 16_000 + CLIP_NOTE.chars().count());
        assert!(out.contains("\n     1  line 1\n"));
    }
    // Clipping counts characters, not bytes.
    let config = EditorConfig::default().max_output_chars(100);
    let f = Fixture::local_with(config).await;
    let p = f.write("cjk.txt", "中".repeat(500)).await;
    let out = f.ok(json!({"command": "view", "path": p})).await;
    assert_eq!(out.chars().count(), 100 + CLIP_NOTE.chars().count());
}

#[tokio::test]
async fn files_above_the_size_bound_are_refused() {
    let config = EditorConfig::default().max_file_bytes(10);
    let f = Fixture::local_with(config).await;
    let p = f.write("big.txt", "0123456789abc").await;
    assert_eq!(
        f.err(json!({"command": "view", "path": p})).await,
        format!(
            "The file {p} is 13 bytes, more than this tool's limit of 10 bytes. Use the shell to work with it, e.g. `grep -n` to find lines and `sed -n 'A,Bp'` to print them."
        )
    );
}

#[tokio::test]
async fn schema_is_the_contract() {
    let editor = Editor::new(MemFs::new());
    let schema = editor.spec().openai();
    assert_eq!(schema["name"], "str_replace_editor");
    let params = &schema["parameters"];
    assert_eq!(params["required"], json!(["command", "path"]));
    assert_eq!(
        params["properties"]["command"]["enum"],
        json!(["view", "create", "str_replace", "insert"])
    );
    let mut names: Vec<&str> = params["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "command",
            "file_text",
            "insert_line",
            "new_str",
            "old_str",
            "path",
            "view_range"
        ]
    );
    assert_eq!(
        params["properties"]["view_range"]["items"]["type"],
        "integer"
    );
    assert_eq!(params["properties"]["insert_line"]["type"], "integer");
    // The definition as models have been offered it, member for member.
    assert_eq!(
        params,
        &json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "enum": ["view", "create", "str_replace", "insert"],
                    "description": "The command to run: `view`, `create`, `str_replace` or `insert`."
                },
                "path": {
                    "type": "string",
                    "description": "Absolute path to a file or directory, e.g. `/repo/file.py` or `/repo`."
                },
                "file_text": {
                    "type": "string",
                    "description": "Required for `create`: the content of the new file."
                },
                "insert_line": {
                    "type": "integer",
                    "description": "Required for `insert`: `new_str` is inserted after this line (0 inserts at the top)."
                },
                "new_str": {
                    "type": "string",
                    "description": "For `str_replace`: the replacement text (omit it to delete `old_str`). For `insert`: the text to insert (required)."
                },
                "old_str": {
                    "type": "string",
                    "description": "Required for `str_replace`: the exact text to replace. It must occur exactly once in the file."
                },
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "Optional for `view` of a file: [first, last] line numbers, 1-based and inclusive; last = -1 means to the end of the file."
                }
            },
            "required": ["command", "path"]
        })
    );
    assert_eq!(schema["description"], editor.config().description);
}

suite!(
    path_errors,
    view_file_shows_every_line_as_it_is,
    view_range_errors,
    view_directory_two_levels_sorted_without_hidden,
    create,
    str_replace,
    ambiguity_lists_the_line_of_every_match,
    insert,
    crlf_files_stay_crlf,
    bom_whitespace_and_missing_final_newline_survive,
    non_utf8_files_are_edited_losslessly_or_refused,
    binary_files_are_not_dumped_or_edited,
    unicode_paths_and_content,
    long_output_is_clipped_with_the_note,
);
