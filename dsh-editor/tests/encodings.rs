//! Files in the encodings agents meet in real repositories, viewed and
//! edited through the real filesystem; every expected byte comes from
//! Python's own codecs (`/usr/bin/python3`, or `DSH_TEST_PYTHON`), not from
//! the crate under test.
#![cfg(all(unix, feature = "detect-encodings"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use dsh_editor::fs::LocalFs;
use dsh_editor::{Editor, EditorError};
use serde_json::{Value, json};

fn python() -> String {
    std::env::var("DSH_TEST_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_owned())
}

/// `text` encoded by Python's codec `codec`.
fn py_encode(text: &str, codec: &str) -> Vec<u8> {
    let out = Command::new(python())
        .args([
            "-c",
            "import sys; sys.stdout.buffer.write(sys.argv[1].encode(sys.argv[2]))",
            text,
            codec,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

struct Case {
    /// Python's codec name.
    codec: &'static str,
    /// The name the view's header gives.
    shown_as: &'static str,
    text: &'static str,
    /// Replaced by `new`, in the encoding's own script.
    old: &'static str,
    new: &'static str,
    /// Inserted after line 1.
    inserted: &'static str,
    /// A character the encoding cannot hold.
    foreign: char,
}

const CASES: [Case; 7] = [
    Case {
        codec: "cp1251",
        shown_as: "windows-1251",
        text: "# -*- coding: cp1251 -*-\n# Тестовый файл\nname = 'Привет'\n",
        old: "Привет",
        new: "Здравствуй, мир",
        inserted: "# Новая строка",
        foreign: '中',
    },
    Case {
        codec: "cp1251",
        shown_as: "windows-1251",
        text: "Съешь же ещё этих мягких французских булок, да выпей чаю.\nВ чащах юга жил бы цитрус? Да, но фальшивый экземпляр!\n",
        old: "цитрус",
        new: "лимон",
        inserted: "Широкая электрификация южных губерний даст мощный толчок подъёму сельского хозяйства.",
        foreign: 'é',
    },
    Case {
        codec: "gbk",
        shown_as: "GBK",
        text: "这是一个测试文件，用于检查编码的检测是否正确。\n中文内容在这里，我们再写一些常见的汉字。\n",
        old: "中文内容",
        new: "新的内容",
        inserted: "插入的一行文字。",
        foreign: '한',
    },
    Case {
        codec: "shift_jis",
        shown_as: "Shift_JIS",
        text: "これはテストファイルです。日本語の文字コードを確認します。\n二行目の文章もここにあります。\n",
        old: "二行目",
        new: "第二の行",
        inserted: "挿入された行です。",
        foreign: '한',
    },
    Case {
        codec: "euc_kr",
        shown_as: "EUC-KR",
        text: "이것은 테스트 파일입니다. 한국어 인코딩을 확인합니다.\n두 번째 줄도 여기에 있습니다.\n",
        old: "두 번째",
        new: "둘째",
        inserted: "삽입된 줄입니다.",
        foreign: 'é',
    },
    Case {
        codec: "iso8859_15",
        shown_as: "ISO-8859-15",
        text: "# -*- coding: iso-8859-15 -*-\nprice = '10 €'\nname = 'Œuvre'\n",
        old: "10 €",
        new: "12 € œ",
        inserted: "# Š ž Ÿ",
        foreign: '™',
    },
    Case {
        codec: "utf-16",
        shown_as: "UTF-16LE",
        text: "Ünïcödé text, 中文, русский\nline two\n",
        old: "line two",
        new: "строка два",
        inserted: "😀 inserted",
        // UTF-16 holds every character: no refusal case.
        foreign: '\0',
    },
];

fn header(path: &str, lines: usize, shown_as: &str) -> String {
    format!(
        "Here's the content of {path} with line numbers (which has a total of {lines} lines, read as {shown_as}):\n"
    )
}

fn numbered(text: &str) -> String {
    text.split('\n')
        .enumerate()
        .map(|(i, l)| format!("{:>6}  {l}\n", i + 1))
        .collect()
}

async fn call(editor: &Editor<LocalFs>, args: Value) -> Result<String, String> {
    editor
        .execute(&args)
        .await
        .map_err(|e| dsh_editor::contract::render_error(&e))
}

#[tokio::test]
async fn legacy_files_are_viewed_and_edited_in_their_own_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let editor = Editor::new(LocalFs::new());
    for (i, case) in CASES.iter().enumerate() {
        let path = dir.path().join(format!("{i}-{}.txt", case.codec));
        let path = path.to_str().unwrap().to_owned();
        let bytes = py_encode(case.text, case.codec);
        assert!(
            std::str::from_utf8(&bytes).is_err(),
            "{}: not UTF-8",
            case.codec
        );
        std::fs::write(&path, &bytes).unwrap();

        let view = call(&editor, json!({"command": "view", "path": path}))
            .await
            .unwrap();
        let lines = case.text.split('\n').count();
        assert_eq!(
            view,
            header(&path, lines, case.shown_as) + &numbered(case.text),
            "{}",
            case.codec
        );

        let replaced = case.text.replacen(case.old, case.new, 1);
        call(
            &editor,
            json!({"command": "str_replace", "path": path, "old_str": case.old, "new_str": case.new}),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            py_encode(&replaced, case.codec),
            "{}",
            case.codec
        );

        let (first, rest) = replaced.split_once('\n').unwrap();
        let inserted = format!("{first}\n{}\n{rest}", case.inserted);
        call(
            &editor,
            json!({"command": "insert", "path": path, "insert_line": 1, "new_str": case.inserted}),
        )
        .await
        .unwrap();
        let now = std::fs::read(&path).unwrap();
        assert_eq!(now, py_encode(&inserted, case.codec), "{}", case.codec);

        if case.foreign != '\0' {
            let err = call(
                &editor,
                json!({"command": "insert", "path": path, "insert_line": 0, "new_str": case.foreign.to_string()}),
            )
            .await
            .unwrap_err();
            assert_eq!(
                err,
                format!(
                    "No edit was made: the file {path} is encoded as {}, which cannot hold the character `{}` (U+{:04X}). Use only characters of that encoding, or convert the file first.",
                    case.shown_as,
                    case.foreign,
                    u32::from(case.foreign)
                ),
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                now,
                "{}: unchanged",
                case.codec
            );
        }
    }
}

/// Bytes no detected encoding reads exactly, and files too short to tell,
/// are read as windows-1252, every byte one character, and edited without
/// changing a byte they do not touch.
#[tokio::test]
async fn what_no_encoding_reads_exactly_falls_back_to_windows_1252() {
    let dir = tempfile::tempdir().unwrap();
    let editor = Editor::new(LocalFs::new());
    let cases: [&[u8]; 4] = [
        // Short: a few bytes.
        b"caf\xe9\n",
        b"\xe9\n",
        // Shift_JIS-looking, cut in the middle of a character.
        b"\x82\xb1\x82\xea\x82\xcd\x82\xc5\x82\n\x82",
        // A declared encoding the bytes are not valid in.
        b"# coding: shift_jis\nx = '\x82'\n",
    ];
    for (i, bytes) in cases.iter().enumerate() {
        let path = dir.path().join(format!("fallback-{i}.txt"));
        let path = path.to_str().unwrap().to_owned();
        std::fs::write(&path, bytes).unwrap();
        let view = call(&editor, json!({"command": "view", "path": path}))
            .await
            .unwrap();
        assert!(view.contains(", read as windows-1252):\n"), "{i}: {view}");
        call(
            &editor,
            json!({"command": "insert", "path": path, "insert_line": 0, "new_str": "# é"}),
        )
        .await
        .unwrap();
        let mut want = b"# \xe9\n".to_vec();
        want.extend_from_slice(bytes);
        assert_eq!(std::fs::read(&path).unwrap(), want, "{i}");
    }
}

/// A declaration wins over UTF-8: an ASCII file declaring cp1251 gets
/// Cyrillic in cp1251, so that Python (which reads it as cp1251) sees what
/// the model wrote; a UTF-8 declaration or none keeps the file UTF-8, with
/// today's exact header.
#[tokio::test]
async fn a_declared_encoding_wins_over_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let editor = Editor::new(LocalFs::new());
    let declared = dir.path().join("declared.py").to_str().unwrap().to_owned();
    std::fs::write(&declared, "# -*- coding: cp1251 -*-\nname = 'x'\n").unwrap();
    call(
        &editor,
        json!({"command": "str_replace", "path": declared, "old_str": "'x'", "new_str": "'Привет'"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read(&declared).unwrap(),
        py_encode("# -*- coding: cp1251 -*-\nname = 'Привет'\n", "cp1251")
    );
    for head in ["# -*- coding: utf-8 -*-\n", ""] {
        let path = dir.path().join("utf8.py").to_str().unwrap().to_owned();
        let text = format!("{head}name = 'Привет'\n");
        std::fs::write(&path, &text).unwrap();
        let view = call(&editor, json!({"command": "view", "path": path}))
            .await
            .unwrap();
        let lines = text.split('\n').count();
        assert_eq!(
            view,
            format!(
                "Here's the content of {path} with line numbers (which has a total of {lines} lines):\n{}",
                numbered(&text)
            )
        );
        call(
            &editor,
            json!({"command": "str_replace", "path": path, "old_str": "Привет", "new_str": "中文"}),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text.replace("Привет", "中文")
        );
    }
}

/// `old_str` equal to `new_str`: refused with a sentence that says so, and
/// the file is not written (bytes, inode and modification time unchanged).
#[tokio::test]
async fn a_no_op_replace_writes_nothing() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let editor = Editor::new(LocalFs::new());
    let path = dir.path().join("same.txt").to_str().unwrap().to_owned();
    std::fs::write(&path, "alpha\nbeta\n").unwrap();
    let before = std::fs::metadata(&path).unwrap();
    let err = editor
        .execute(
            &json!({"command": "str_replace", "path": path, "old_str": "beta", "new_str": "beta"}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, EditorError::ReplaceUnchanged { .. }),
        "{err:?}"
    );
    assert_eq!(
        dsh_editor::contract::render_error(&err),
        format!(
            "No replacement was performed: `new_str` is the same as `old_str`, so {path} would not change. Put the changed text in `new_str`."
        )
    );
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"alpha\nbeta\n");
    assert_eq!(
        (
            after.ino(),
            after.mtime(),
            after.mtime_nsec(),
            after.ctime(),
            after.ctime_nsec()
        ),
        (
            before.ino(),
            before.mtime(),
            before.mtime_nsec(),
            before.ctime(),
            before.ctime_nsec()
        )
    );
    // A missing or repeated `old_str` still says so first.
    assert!(
        call(
            &editor,
            json!({"command": "str_replace", "path": path, "old_str": "gamma", "new_str": "gamma"})
        )
        .await
        .unwrap_err()
        .contains("did not appear verbatim")
    );
}
