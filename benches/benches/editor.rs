//! The editor on big inputs, next to `std::fs` doing the least the same job
//! needs, in the same run.
//!
//! ```text
//! cargo bench -p benches --bench editor
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_editor::{Editor, EditorConfig, fs::LocalFs};
use serde_json::json;

const LINE: &str = "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\t\n";

/// Writes a 50 MB file of `LINE`s with `MIDDLE_AA` in its middle line;
/// returns its length.
fn write_50mb(path: &std::path::Path) -> u64 {
    let n = 50_000_000 / LINE.len();
    let mut text = LINE.repeat(n);
    let mid = (n / 2) * LINE.len();
    text.replace_range(mid..mid + 9, "MIDDLE_AA");
    std::fs::write(path, &text).unwrap();
    text.len() as u64
}

/// One `str_replace` of the middle marker of [`write_50mb`]'s file, back
/// and forth.
fn toggle_middle(
    rt: &tokio::runtime::Runtime,
    editor: &Editor<LocalFs>,
    path: &str,
    flip: &mut bool,
) {
    let (old, new) = if *flip {
        ("MIDDLE_BB", "MIDDLE_AA")
    } else {
        ("MIDDLE_AA", "MIDDLE_BB")
    };
    *flip = !*flip;
    rt.block_on(editor.execute(&json!({
        "command": "str_replace", "path": path, "old_str": old, "new_str": new
    })))
    .unwrap();
}

/// Writes a file of 1,000,000 numbered lines; returns its length.
fn write_1m_lines(path: &std::path::Path) -> u64 {
    let text: String = (0..1_000_000)
        .map(|i| format!("line number {i}\n"))
        .collect();
    std::fs::write(path, &text).unwrap();
    text.len() as u64
}

fn str_replace_50mb(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.log");
    let len = write_50mb(&path);
    let path_str = path.to_str().unwrap().to_owned();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let editor = Editor::new(LocalFs::new());
    let mut group = c.benchmark_group("editor_str_replace_50MB");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Bytes(len));

    group.bench_function("std_fs_read_write", |b| {
        b.iter(|| {
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        })
    });
    // The editor also makes the write durable (fsync) and atomic (rename);
    // this second floor shows what durability alone costs.
    group.bench_function("std_fs_read_write_fsync", |b| {
        b.iter(|| {
            let bytes = std::fs::read(&path).unwrap();
            let mut f = std::fs::File::create(&path).unwrap();
            std::io::Write::write_all(&mut f, &bytes).unwrap();
            f.sync_all().unwrap();
        })
    });
    // The floor of what the editor promises: an atomic, durable replace.
    group.bench_function("atomic_replace_floor", |b| {
        b.iter(|| atomic_replace_floor(&path))
    });
    let mut flip = false;
    group.bench_function("dsh_editor", |b| {
        b.iter(|| toggle_middle(&rt, &editor, &path_str, &mut flip))
    });
    group.finish();
}

/// Read the file, write a temporary file next to it, fsync it, rename it
/// over the file, fsync the directory: the least an atomic, durable replace
/// costs.
fn atomic_replace_floor(path: &std::path::Path) {
    use std::io::Write;
    let bytes = std::fs::read(path).unwrap();
    let dir = path.parent().unwrap();
    let tmp = dir.join(".floor.tmp");
    let mut f = std::fs::File::create(&tmp).unwrap();
    f.write_all(&bytes).unwrap();
    f.sync_all().unwrap();
    std::fs::rename(&tmp, path).unwrap();
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

/// The issue's two editor goals, as ratios to their floors in this run.
fn ratios(_c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let editor = Editor::new(LocalFs::new());
    let dir = tempfile::tempdir().unwrap();

    let big = dir.path().join("big.log");
    write_50mb(&big);
    let big_str = big.to_str().unwrap().to_owned();
    let mut flip = false;
    let (floor, edit) = benches::median_pair(
        11,
        0,
        || atomic_replace_floor(&big),
        || toggle_middle(&rt, &editor, &big_str, &mut flip),
    );
    println!(
        "str_replace in a 50 MB file: {edit:?}, atomic-replace floor {floor:?}: {:.2}x (goal <= 1.2x)",
        edit.as_secs_f64() / floor.as_secs_f64()
    );

    let lines = dir.path().join("lines.txt");
    write_1m_lines(&lines);
    let lines_str = lines.to_str().unwrap().to_owned();
    let (read, view) = benches::median_pair(
        21,
        0,
        || {
            std::fs::read(&lines).unwrap();
        },
        || {
            rt.block_on(editor.execute(&json!({
                "command": "view", "path": lines_str, "view_range": [999_951, -1]
            })))
            .unwrap();
        },
    );
    println!(
        "view of the last 50 lines of a 1M-line file: {view:?}, one read of the file {read:?}: {:.2}x (goal <= 2x)",
        view.as_secs_f64() / read.as_secs_f64()
    );
}

fn view_end_of_1m_lines(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lines.txt");
    let len = write_1m_lines(&path);
    let path_str = path.to_str().unwrap().to_owned();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let editor = Editor::new(LocalFs::new());
    let mut group = c.benchmark_group("editor_view_range_1M_lines");
    group.throughput(Throughput::Bytes(len));
    group.bench_function("std_fs_read_once", |b| {
        b.iter(|| std::fs::read(&path).unwrap())
    });
    group.bench_function("dsh_editor", |b| {
        b.iter(|| {
            rt.block_on(editor.execute(&json!({
                "command": "view", "path": path_str, "view_range": [999_950, 1_000_000]
            })))
            .unwrap()
        })
    });
    group.finish();
}

fn list_20k_tree(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for d in 0..200 {
        let sub = dir.path().join(format!("pkg-{d:03}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..100 {
            std::fs::File::create(sub.join(format!("module_{f:03}.py"))).unwrap();
        }
    }
    let root = dir.path().to_str().unwrap().to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A bound large enough that the whole tree is listed.
    let editor = Editor::with_config(
        LocalFs::new(),
        EditorConfig::default().max_output_chars(10_000_000),
    )
    .unwrap();
    let mut group = c.benchmark_group("editor_list_20k_tree");
    group.sample_size(20);
    group.bench_function("std_fs_walk_two_levels", |b| {
        b.iter(|| {
            let mut names = Vec::new();
            for e in std::fs::read_dir(&root).unwrap() {
                let e = e.unwrap();
                for f in std::fs::read_dir(e.path()).unwrap() {
                    names.push(f.unwrap().path());
                }
                names.push(e.path());
            }
            names.sort();
            names
        })
    });
    group.bench_function("dsh_editor", |b| {
        b.iter(|| {
            rt.block_on(editor.execute(&json!({"command": "view", "path": root})))
                .unwrap()
        })
    });
    group.finish();
}

/// A `str_replace` whose `new_str` is its `old_str`: refused without a
/// write (and without waiting for the next second, as a same-size edit
/// would), next to one read of the file (the baseline) and a real edit and
/// its undo.
fn unchanged_replace(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("module.py");
    let text: String = (0..200).map(|i| format!("value_{i} = {i}\n")).collect();
    std::fs::write(&path, &text).unwrap();
    let path_str = path.to_str().unwrap().to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let editor = Editor::new(LocalFs::new());
    let same = json!({"command": "str_replace", "path": path_str, "old_str": "value_7 = 7", "new_str": "value_7 = 7"});
    let mut group = c.benchmark_group("editor_str_replace_unchanged");
    group.bench_function("std_fs_read_once", |b| {
        b.iter(|| std::fs::read(&path).unwrap())
    });
    group.bench_function("dsh_editor_unchanged", |b| {
        b.iter(|| rt.block_on(editor.execute(&same)).unwrap_err())
    });
    let there = json!({"command": "str_replace", "path": path_str, "old_str": "value_7 = 7", "new_str": "value_7 = 70"});
    let back = json!({"command": "str_replace", "path": path_str, "old_str": "value_7 = 70", "new_str": "value_7 = 7"});
    group.bench_function("dsh_editor_edit_and_undo", |b| {
        b.iter(|| {
            rt.block_on(editor.execute(&there)).unwrap();
            rt.block_on(editor.execute(&back)).unwrap()
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    ratios,
    str_replace_50mb,
    view_end_of_1m_lines,
    list_20k_tree,
    unchanged_replace
);
criterion_main!(benches);
