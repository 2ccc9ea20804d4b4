//! The tool: configuration, schema, and `execute`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use dsh_tool::{Kind, Parameter, ToolSpec};
use serde_json::Value;
use tracing::Instrument;

use crate::args::{self, Parsed};
use crate::fs::{BlockingFs, FileKind, Fs, FsError, Inline, Metadata, Version};
use crate::outcome::{DirectoryView, EditorOutcome, FileView};
use crate::scan::{Kept, LineScan};
use crate::text::{DecodeError, Document};
use crate::{EditorError, EditorRequest, contract, listing, ops};

/// The tool's name in schemas.
pub const TOOL_NAME: &str = "str_replace_editor";

/// The default tool description.
pub const DEFAULT_DESCRIPTION: &str = "View, create and edit files.\n\
* `view` on a file shows its lines numbered like `cat -n` (optionally only `view_range`); on a directory it lists files and directories up to 2 levels deep, without hidden ones.\n\
* `create` writes a new file; it cannot overwrite an existing path.\n\
* `str_replace` replaces `old_str` with `new_str`. `old_str` must match exactly one place in the file, character for character, whitespace included: add surrounding lines to make it unique.\n\
* `insert` inserts `new_str` after line `insert_line` (0 = at the top).\n\
* Paths must be absolute. Long output is clipped and marked with `<response clipped>`.";

/// The editor's settings: [`EditorConfig::default`] and a setter per field
/// (the fields are public to read and assign; new settings arrive as new
/// fields with defaults).
///
/// ```
/// use dsh_editor::EditorConfig;
/// let config = EditorConfig::default().max_output_chars(8000);
/// assert!(config.validate().is_ok());
/// assert!(config.max_output_chars(0).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EditorConfig {
    /// Output longer than this many characters is clipped (default 16,000).
    pub max_output_chars: usize,
    /// Files larger than this many bytes are neither viewed nor edited (default 64 MiB).
    pub max_file_bytes: u64,
    /// The tool description in the schema.
    pub description: String,
}

impl Default for EditorConfig {
    fn default() -> Self {
        EditorConfig {
            max_output_chars: 16_000,
            max_file_bytes: 64 * 1024 * 1024,
            description: DEFAULT_DESCRIPTION.to_owned(),
        }
    }
}

/// An invalid [`EditorConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditorConfigError {
    /// A bound is zero.
    #[error("editor config: `{0}` must be a positive integer")]
    NotPositive(&'static str),
    /// The description is empty.
    #[error("editor config: `description` must be a non-empty string")]
    EmptyDescription,
}

impl EditorConfig {
    /// Sets [`EditorConfig::max_output_chars`].
    #[must_use]
    pub fn max_output_chars(mut self, max_output_chars: usize) -> Self {
        self.max_output_chars = max_output_chars;
        self
    }

    /// Sets [`EditorConfig::max_file_bytes`].
    #[must_use]
    pub fn max_file_bytes(mut self, max_file_bytes: u64) -> Self {
        self.max_file_bytes = max_file_bytes;
        self
    }

    /// Sets [`EditorConfig::description`].
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Checks that bounds are positive and the description non-empty.
    pub fn validate(&self) -> Result<(), EditorConfigError> {
        if self.max_output_chars == 0 {
            return Err(EditorConfigError::NotPositive("max_output_chars"));
        }
        if self.max_file_bytes == 0 {
            return Err(EditorConfigError::NotPositive("max_file_bytes"));
        }
        if self.description.trim().is_empty() {
            return Err(EditorConfigError::EmptyDescription);
        }
        Ok(())
    }
}

/// The `str_replace_editor` tool over a filesystem `F`.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use dsh_editor::{Editor, fs::MemFs};
/// use serde_json::json;
///
/// let editor = Editor::new(MemFs::new());
/// let created = editor
///     .execute(&json!({"command": "create", "path": "/notes.txt", "file_text": "one\ntwo\n"}))
///     .await;
/// assert_eq!(created.unwrap(), "New file created successfully at: /notes.txt");
///
/// editor
///     .execute(&json!({"command": "str_replace", "path": "/notes.txt", "old_str": "two", "new_str": "2"}))
///     .await
///     .unwrap();
/// let view = editor.execute(&json!({"command": "view", "path": "/notes.txt"})).await.unwrap();
/// assert_eq!(
///     view,
///     "Here's the content of /notes.txt with line numbers (which has a total of 3 lines):\n     1  one\n     2  2\n     3  \n"
/// );
///
/// // An error's text for the model is `contract::render_error`'s (its
/// // `Display` is for developers).
/// let err = editor.execute(&json!({"command": "view", "path": "notes.txt"})).await.unwrap_err();
/// assert_eq!(
///     dsh_editor::contract::render_error(&err),
///     "The path notes.txt is not an absolute path, it should start with `/`. Maybe you meant /notes.txt?"
/// );
/// assert_eq!(err.to_string(), "path notes.txt is not absolute");
/// # });
/// ```
///
/// Cloning an editor is cheap and shares its filesystem.
#[derive(Debug)]
pub struct Editor<F> {
    fs: Arc<F>,
    /// Shared by clones: the call run on the blocking pool clones the
    /// editor, and the description need not be copied each time.
    config: Arc<EditorConfig>,
}

impl<F> Clone for Editor<F> {
    fn clone(&self) -> Self {
        Editor {
            fs: Arc::clone(&self.fs),
            config: Arc::clone(&self.config),
        }
    }
}

/// How many matches of an ambiguous `old_str` the error lists by line; the
/// rest are counted ("… and N more").
pub const MAX_LISTED_MATCHES: usize = 200;

impl<F: Fs + 'static> Editor<F> {
    /// An editor over `fs` with the default configuration.
    pub fn new(fs: F) -> Self {
        Editor {
            fs: Arc::new(fs),
            config: Arc::new(EditorConfig::default()),
        }
    }

    /// An editor over `fs` with `config`, once it is validated.
    pub fn with_config(fs: F, config: EditorConfig) -> Result<Self, EditorConfigError> {
        config.validate()?;
        Ok(Editor {
            fs: Arc::new(fs),
            config: Arc::new(config),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EditorConfig {
        &self.config
    }

    /// The filesystem.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// The tool's definition: its name, the configured description and
    /// the parameters of [`EditorRequest`]. Render it for a host with
    /// [`ToolSpec::openai`], [`ToolSpec::anthropic`] or [`ToolSpec::mcp`].
    ///
    /// ```
    /// use dsh_editor::{Editor, fs::MemFs};
    /// let spec = Editor::new(MemFs::new()).spec();
    /// assert_eq!(spec.name, "str_replace_editor");
    /// assert_eq!(spec.mcp()["inputSchema"]["required"], serde_json::json!(["command", "path"]));
    /// ```
    pub fn spec(&self) -> ToolSpec {
        tool_spec(&self.config.description)
    }

    /// Runs one tool call given as the model's JSON arguments. `Ok` holds
    /// the text for the model ([`contract::render`] of the outcome); an
    /// error's text for the model is [`contract::render_error`] (its
    /// `Display` is for developers). Nothing on disk changes unless the
    /// call succeeds.
    pub async fn execute(&self, args: &Value) -> Result<String, EditorError> {
        let outcome = self.traced(args::parse(args)).await?;
        Ok(contract::render(&outcome))
    }

    /// Runs one typed call and returns what it did as data.
    pub async fn call(&self, request: EditorRequest) -> Result<EditorOutcome, EditorError> {
        self.traced(Ok(Parsed {
            request,
            bad_range: false,
        }))
        .await
    }

    /// Runs a parsed call inside the tool call's span and logs how it ended.
    async fn traced(
        &self,
        parsed: Result<Parsed, EditorError>,
    ) -> Result<EditorOutcome, EditorError> {
        let started = Instant::now();
        let (command, path) = match &parsed {
            Ok(p) => (p.request.command(), p.request.path().to_owned()),
            Err(_) => ("invalid", String::new()),
        };
        let span = tracing::info_span!("str_replace_editor", command, path = %path);
        // The span covers the call through `instrument`: an `enter()` guard
        // held across an await would mark other tasks' events as ours.
        let result = match parsed {
            Ok(p) => {
                self.offloaded(p.request, p.bad_range)
                    .instrument(span.clone())
                    .await
            }
            Err(e) => Err(e),
        };
        let _enter = span.enter();
        tracing::info!(
            duration_us = started.elapsed().as_micros() as u64,
            outcome = if result.is_ok() { "ok" } else { "error" },
            error = result.as_ref().err().map(tracing::field::display),
            "tool call finished"
        );
        result
    }

    /// Runs the call; over a filesystem of blocking calls
    /// ([`Fs::blocking`]) inside a tokio runtime (with the `tokio` feature),
    /// as one job on tokio's blocking pool ([`Editor::on_pool`]); without
    /// a runtime to keep free (or the feature), the calls are made right
    /// here.
    async fn offloaded(
        &self,
        request: EditorRequest,
        bad_range: bool,
    ) -> Result<EditorOutcome, EditorError> {
        let Some(blocking) = self.fs.blocking() else {
            return Call::over(&*self.fs, &self.config)
                .run(request, bad_range)
                .await;
        };
        #[cfg(feature = "tokio")]
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            return self.on_pool(blocking, runtime, request, bad_range).await;
        }
        Call::blocking(blocking, &self.config)
            .run(request, bad_range)
            .await
    }

    /// Runs the call over the blocking filesystem `blocking` as one job on
    /// `runtime`'s blocking pool that makes the calls directly (one hop for
    /// the whole call). That job runs to its end even if this future is
    /// dropped: an edit is made whole or not at all, never half. A view of
    /// a small file over a filesystem that
    /// [reads quickly](BlockingFs::reads_quickly) runs right here instead.
    #[cfg(feature = "tokio")]
    async fn on_pool(
        &self,
        blocking: &dyn BlockingFs,
        runtime: tokio::runtime::Handle,
        request: EditorRequest,
        bad_range: bool,
    ) -> Result<EditorOutcome, EditorError> {
        if let Some(found) = quick_view(blocking, &request) {
            // A view of a small file on a machine of local filesystems: a
            // stat and a read of at most `QUICK_READ_BYTES` from its disks,
            // cheaper here than the hop to another thread and back. (A
            // failed stat is the call's answer: made again elsewhere, it
            // could hide what failed.)
            let call = Call::blocking(blocking, &self.config);
            *call.found.lock().unwrap_or_else(PoisonError::into_inner) = Some(found);
            return call.run(request, bad_range).await;
        }
        let editor = self.clone();
        let path = request.path().to_owned();
        let span = tracing::Span::current();
        let job = runtime.clone().spawn_blocking(move || {
            let _entered = span.enter();
            let call = match editor.fs.blocking() {
                Some(blocking) => Call::blocking(blocking, &editor.config),
                None => Call::over(&*editor.fs, &editor.config),
            };
            runtime.block_on(call.run(request, bad_range))
        });
        job.await.unwrap_or_else(|joined| {
            Err(EditorError::Io {
                path,
                source: Arc::new(std::io::Error::other(joined.to_string())),
            })
        })
    }
}

/// Whether `request` is a `view` of a file of at most [`QUICK_READ_BYTES`](crate::fs::QUICK_READ_BYTES)
/// (or of nothing it can stat) on a filesystem that
/// [reads quickly](BlockingFs::reads_quickly): then the call runs on the
/// caller's thread, with what the `stat_open` that decided it found (made
/// there too, which such a filesystem allows).
#[cfg(feature = "tokio")]
fn quick_view(fs: &dyn BlockingFs, request: &EditorRequest) -> Option<Found> {
    let EditorRequest::View { path, .. } = request else {
        return None;
    };
    if !fs.reads_quickly() {
        return None;
    }
    let found = fs.stat_open(Path::new(path));
    match &found {
        Ok((meta, _)) if meta.kind != FileKind::File || meta.len > crate::fs::QUICK_READ_BYTES => {
            None
        }
        _ => Some((PathBuf::from(path), found)),
    }
}

/// A path and what [`BlockingFs::stat_open`] found there.
type Found = (PathBuf, Result<(Metadata, Option<std::fs::File>), FsError>);

/// One tool call over a filesystem.
struct Call<'a> {
    via: Via<'a>,
    config: &'a EditorConfig,
    /// What the stat that ran this call here found (see [`quick_view`]).
    found: Mutex<Option<Found>>,
    /// The file a view's stat opened, for its read.
    opened: Mutex<Option<(PathBuf, std::fs::File)>>,
    /// What a view's [`Fs::stat_read`] read, for its read.
    read_ahead: Mutex<Option<(PathBuf, Vec<u8>, Version)>>,
}

/// How a call reaches its filesystem.
enum Via<'a> {
    /// Through its futures.
    Futures(&'a dyn Fs),
    /// Through its blocking calls, made on this thread: the call runs where
    /// it may block.
    Blocking(Inline<'a>),
}

impl<'a> Call<'a> {
    /// A call over `fs` through its futures.
    fn over(fs: &'a dyn Fs, config: &'a EditorConfig) -> Self {
        Call {
            via: Via::Futures(fs),
            config,
            found: Mutex::new(None),
            opened: Mutex::new(None),
            read_ahead: Mutex::new(None),
        }
    }

    /// A call that makes `fs`'s blocking calls on this thread.
    fn blocking(fs: &'a dyn BlockingFs, config: &'a EditorConfig) -> Self {
        Call {
            via: Via::Blocking(Inline(fs)),
            config,
            found: Mutex::new(None),
            opened: Mutex::new(None),
            read_ahead: Mutex::new(None),
        }
    }

    fn fs(&self) -> &dyn Fs {
        match &self.via {
            Via::Futures(fs) => *fs,
            Via::Blocking(inline) => inline,
        }
    }

    async fn run(
        &self,
        request: EditorRequest,
        bad_range: bool,
    ) -> Result<EditorOutcome, EditorError> {
        check_absolute(request.path())?;
        match request {
            EditorRequest::View { path, view_range } => {
                self.view(path, view_range, bad_range).await
            }
            EditorRequest::Create { path, file_text } => self.create(path, file_text).await,
            EditorRequest::StrReplace {
                path,
                old_str,
                new_str,
            } => self.str_replace(path, old_str, new_str).await,
            EditorRequest::Insert {
                path,
                insert_line,
                new_str,
            } => self.insert(path, insert_line, new_str).await,
        }
    }

    async fn view(
        &self,
        display: String,
        view_range: Option<(i64, i64)>,
        bad_range: bool,
    ) -> Result<EditorOutcome, EditorError> {
        let path = Path::new(&display);
        let meta = self.view_stat(path, &display).await?;
        match meta.kind {
            FileKind::Directory if view_range.is_some() || bad_range => {
                Err(EditorError::RangeOnDirectory)
            }
            FileKind::Directory => Ok(EditorOutcome::DirectoryView(self.view_dir(display).await)),
            FileKind::File => {
                let first = view_range.map_or(1, |(a, _)| usize::try_from(a).unwrap_or(1));
                let kept = self.lines_from(path, &display, &meta, first).await?;
                if bad_range {
                    return Err(EditorError::RangeShape);
                }
                Ok(EditorOutcome::FileView(
                    self.view_file(display, &kept, view_range)?,
                ))
            }
            FileKind::Other => Err(EditorError::NotRegular(display)),
        }
    }

    async fn create(
        &self,
        display: String,
        file_text: Option<String>,
    ) -> Result<EditorOutcome, EditorError> {
        let path = Path::new(&display);
        match self.fs().stat(path).await {
            Ok(_) => return Err(EditorError::CreateExists(display)),
            Err(FsError::NotFound(_)) => {}
            Err(e) => return Err(fs_error(e, &display)),
        }
        let text = file_text.ok_or(EditorError::CreateNoText)?;
        self.fs()
            .create_new(path, text.into_bytes())
            .await
            .map_err(|e| match e {
                FsError::AlreadyExists(_) => EditorError::CreateExists(display.clone()),
                e => fs_error(e, &display),
            })?;
        Ok(EditorOutcome::Created { path: display })
    }

    async fn str_replace(
        &self,
        display: String,
        old_str: Option<String>,
        new_str: Option<String>,
    ) -> Result<EditorOutcome, EditorError> {
        let path = Path::new(&display);
        let meta = self.editable(path, &display).await?;
        let old = old_str.ok_or(EditorError::ReplaceNoOld)?;
        if old.is_empty() {
            return Err(EditorError::ReplaceEmptyOld);
        }
        let (mut doc, version) = self.load(path, &display, &meta).await?;
        let needle = doc.normalize_input(&old).into_owned();
        let new = new_str.unwrap_or_default();
        let replacement = doc.normalize_input(&new).into_owned();
        let (hits, total) = ops::find_some(doc.text(), &needle, MAX_LISTED_MATCHES);
        match hits.as_slice() {
            [] => Err(EditorError::ReplaceNotFound { old, path: display }),
            // The file would not change: nothing is written, and the model
            // learns that its edit was a no-op rather than believing it
            // landed.
            [_] if total == 1 && needle == replacement => {
                Err(EditorError::ReplaceUnchanged { path: display })
            }
            [at] if total == 1 => {
                // In place: a 50 MB file is not copied into a second buffer.
                doc.replace_range(*at..*at + needle.len(), &replacement);
                self.store(display, doc, &version).await
            }
            _ => Err(EditorError::ReplaceAmbiguous {
                lines: ops::line_numbers(doc.text(), &hits),
                more: total - hits.len(),
                old,
            }),
        }
    }

    async fn insert(
        &self,
        display: String,
        insert_line: Option<i64>,
        new_str: Option<String>,
    ) -> Result<EditorOutcome, EditorError> {
        let path = Path::new(&display);
        let meta = self.editable(path, &display).await?;
        let line = insert_line.ok_or(EditorError::InsertNoLine)?;
        let new = new_str.ok_or(EditorError::InsertNoText)?;
        let (doc, version) = self.load(path, &display, &meta).await?;
        let lines = ops::line_count(doc.text());
        let inserted = doc.normalize_input(&new);
        let edited = usize::try_from(line)
            .ok()
            .and_then(|after| ops::insert_after(doc.text(), after, &inserted))
            .ok_or(EditorError::InsertRange { line, lines })?;
        self.store(display, doc.with_text(edited), &version).await
    }

    async fn existing(&self, path: &Path, display: &str) -> Result<Metadata, EditorError> {
        self.fs()
            .stat(path)
            .await
            .map_err(|e| missing_or(e, display))
    }

    /// [`Call::existing`] for a view: over a filesystem of blocking calls,
    /// through [`BlockingFs::stat_open`] (or what the one that decided to
    /// run the call here found), keeping the file it opened for the read.
    async fn view_stat(&self, path: &Path, display: &str) -> Result<Metadata, EditorError> {
        let Via::Blocking(Inline(fs)) = self.via else {
            let (meta, read) = self
                .fs()
                .stat_read(path, self.config.max_file_bytes)
                .await
                .map_err(|e| missing_or(e, display))?;
            *self
                .read_ahead
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                read.map(|(bytes, version)| (path.to_owned(), bytes, version));
            return Ok(meta);
        };
        let known = self
            .found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .filter(|(at, _)| at == path);
        let found = match known {
            Some((_, found)) => found,
            None => fs.stat_open(path),
        };
        let (meta, file) = found.map_err(|e| missing_or(e, display))?;
        *self.opened.lock().unwrap_or_else(PoisonError::into_inner) =
            file.map(|file| (path.to_owned(), file));
        Ok(meta)
    }

    /// A path that an edit command may work on: an existing regular file.
    async fn editable(&self, path: &Path, display: &str) -> Result<Metadata, EditorError> {
        let meta = self.existing(path, display).await?;
        match meta.kind {
            FileKind::File => Ok(meta),
            FileKind::Directory => Err(EditorError::DirectoryNotView(display.to_owned())),
            FileKind::Other => Err(EditorError::NotRegular(display.to_owned())),
        }
    }

    /// The text of the file at `path` from line `first` on (or from its
    /// start), and its line count, for a view. Through blocking calls, one
    /// pass over the file's blocks keeps only that text, up to what the
    /// output can show; a file that is not UTF-8 without NUL, and any file
    /// read through futures (a remote filesystem's, which would be fetched
    /// twice), is decoded whole.
    async fn lines_from(
        &self,
        path: &Path,
        display: &str,
        meta: &Metadata,
        first: usize,
    ) -> Result<Kept, EditorError> {
        if let Via::Blocking(Inline(fs)) = self.via {
            self.check_len(display, meta)?;
            // A clipped view shows at most `max_output_chars` characters.
            let shown = self.config.max_output_chars.saturating_add(1);
            let mut scan = LineScan::new(first, shown.saturating_mul(4));
            let limit = self.config.max_file_bytes;
            let opened = self
                .opened
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .filter(|(at, _)| at == path)
                .map(|(_, file)| file);
            match opened {
                Some(mut file) => {
                    crate::fs::read_file_blocks(path, &mut file, meta.len, limit, &mut |block| {
                        scan.push(block)
                    })
                }
                None => fs
                    .read_blocks(path, limit, &mut |block| scan.push(block))
                    .map(drop),
            }
            .map_err(|e| fs_error(e, display))?;
            if let Some(kept) = scan.finish() {
                return Ok(kept);
            }
        }
        let doc = self.load(path, display, meta).await?.0;
        let encoding = doc.encoding();
        let text = doc.into_text();
        Ok(Kept {
            lines: ops::line_count(&text),
            first_line: 1,
            text,
            encoding,
        })
    }

    /// Refuses a file longer than `max_file_bytes` before reading it.
    fn check_len(&self, display: &str, meta: &Metadata) -> Result<(), EditorError> {
        if meta.len > self.config.max_file_bytes {
            return Err(EditorError::TooLarge {
                path: display.to_owned(),
                len: meta.len,
                max: self.config.max_file_bytes,
            });
        }
        Ok(())
    }

    async fn load(
        &self,
        path: &Path,
        display: &str,
        meta: &Metadata,
    ) -> Result<(Document, Version), EditorError> {
        self.check_len(display, meta)?;
        let ahead = self
            .read_ahead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .filter(|(at, _, _)| at == path);
        let (bytes, version) = match ahead {
            Some((_, bytes, version)) => (bytes, version),
            None => self
                .fs()
                .read(path, self.config.max_file_bytes)
                .await
                .map_err(|e| fs_error(e, display))?,
        };
        let doc = Document::decode(bytes)
            .map_err(|DecodeError::Binary| EditorError::Binary(display.to_owned()))?;
        Ok((doc, version))
    }

    async fn store(
        &self,
        display: String,
        edited: Document,
        version: &Version,
    ) -> Result<EditorOutcome, EditorError> {
        let unrepresentable = |u: crate::text::Unrepresentable| EditorError::Unrepresentable {
            path: display.clone(),
            encoding: u.encoding,
            ch: u.ch,
        };
        let bytes = edited.encode().map_err(unrepresentable)?;
        self.fs()
            .replace(Path::new(&display), bytes, version)
            .await
            .map_err(|e| fs_error(e, &display))?;
        Ok(EditorOutcome::Edited { path: display })
    }

    fn view_file(
        &self,
        display: String,
        kept: &Kept,
        range: Option<(i64, i64)>,
    ) -> Result<FileView, EditorError> {
        let lines = kept.lines;
        let (first, last) = match range {
            None => (1, lines),
            Some(range) => check_range(range, lines)?,
        };
        let mut view = FileView {
            path: display,
            total_lines: lines,
            view_range: range,
            first_line: first,
            last_line: last,
            encoding: kept.encoding,
            numbered: String::new(),
            cut: None,
        };
        let header = contract::file_header(&view);
        let max = self.config.max_output_chars;
        let mut body = String::new();
        let text = kept.text.as_str();
        // A scan kept the text from the first line asked for; a whole
        // decode, from line 1.
        let start = if kept.first_line == 1 {
            ops::line_start_counted(text, lines, first)
        } else {
            0
        };
        let used = header.chars().count();
        ops::number_lines_from(text, start, first, last, &mut body, used, max);
        (view.numbered, view.cut) = contract::clip(used, body, max);
        Ok(view)
    }

    async fn view_dir(&self, display: String) -> DirectoryView {
        let root = display.trim_end_matches('/');
        let root = if root.is_empty() { "/" } else { root }.to_owned();
        let mut view = DirectoryView {
            path: display,
            listing: String::new(),
            cut: None,
        };
        let header = contract::directory_header(&view);
        let max = self.config.max_output_chars;
        let mut body = String::new();
        let used = header.chars().count();
        listing::list(self.fs(), &root, &mut body, used, max).await;
        body.push('\n');
        (view.listing, view.cut) = contract::clip(used, body, max);
        view
    }
}
/// A failed `stat` of a path that must exist: [`EditorError::Missing`] when
/// nothing is there.
fn missing_or(e: FsError, display: &str) -> EditorError {
    match e {
        FsError::NotFound(_) => EditorError::Missing(display.to_owned()),
        e => fs_error(e, display),
    }
}

/// Checks `view_range` against a file of `lines` lines; returns 1-based inclusive bounds.
fn check_range((a, b): (i64, i64), lines: usize) -> Result<(usize, usize), EditorError> {
    let n = lines as i64;
    if a < 1 || a > n {
        return Err(EditorError::RangeFirst {
            first: a,
            second: b,
            lines,
        });
    }
    if b == -1 {
        return Ok((a as usize, lines));
    }
    if b > n {
        return Err(EditorError::RangeSecondTooLarge {
            first: a,
            second: b,
            lines,
        });
    }
    if b < a {
        return Err(EditorError::RangeSecondBeforeFirst {
            first: a,
            second: b,
        });
    }
    Ok((a as usize, b as usize))
}

#[cfg(not(windows))]
fn check_absolute(path: &str) -> Result<(), EditorError> {
    if path.starts_with('/') {
        return Ok(());
    }
    Err(EditorError::RelativePath {
        path: path.to_owned(),
        suggestion: format!("/{path}"),
    })
}

#[cfg(windows)]
fn check_absolute(path: &str) -> Result<(), EditorError> {
    if Path::new(path).is_absolute() {
        return Ok(());
    }
    Err(EditorError::RelativePath {
        path: path.to_owned(),
        suggestion: format!("C:\\{}", path.trim_start_matches(['\\', '/'])),
    })
}

fn fs_error(e: FsError, display: &str) -> EditorError {
    let display = display.to_owned();
    match e {
        FsError::NotFound(_) => EditorError::Missing(display),
        FsError::AlreadyExists(_) => EditorError::CreateExists(display),
        FsError::Changed(_) => EditorError::Changed(display),
        FsError::PermissionDenied(_) => EditorError::PermissionDenied(display),
        FsError::NotRegular(_) => EditorError::NotRegular(display),
        FsError::TooLarge { len, limit, .. } => EditorError::TooLarge {
            path: display,
            len,
            max: limit,
        },
        FsError::FileTooLarge { len, limit, .. } => EditorError::FileTooLarge {
            path: display,
            len,
            limit,
        },
        FsError::Refused { message, .. } => EditorError::Refused(message),
        FsError::Io { source, .. } => EditorError::Io {
            path: display,
            source: std::sync::Arc::new(source),
        },
    }
}

/// The editor's definition with `description`.
fn tool_spec(description: &str) -> ToolSpec {
    ToolSpec::new(TOOL_NAME, description)
        .parameter(Parameter::required(
            "command",
            Kind::one_of(["view", "create", "str_replace", "insert"]),
            "The command to run: `view`, `create`, `str_replace` or `insert`.",
        ))
        .parameter(Parameter::required(
            "path",
            Kind::String,
            "Absolute path to a file or directory, e.g. `/repo/file.py` or `/repo`.",
        ))
        .parameter(Parameter::optional(
            "file_text",
            Kind::String,
            "Required for `create`: the content of the new file.",
        ))
        .parameter(Parameter::optional(
            "insert_line",
            Kind::Integer,
            "Required for `insert`: `new_str` is inserted after this line (0 inserts at the top).",
        ))
        .parameter(Parameter::optional(
            "new_str",
            Kind::String,
            "For `str_replace`: the replacement text (omit it to delete `old_str`). For `insert`: the text to insert (required).",
        ))
        .parameter(Parameter::optional(
            "old_str",
            Kind::String,
            "Required for `str_replace`: the exact text to replace. It must occur exactly once in the file.",
        ))
        .parameter(Parameter::optional(
            "view_range",
            Kind::array_of(Kind::Integer),
            "Optional for `view` of a file: [first, last] line numbers, 1-based and inclusive; last = -1 means to the end of the file.",
        ))
}
