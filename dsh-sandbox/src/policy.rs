//! The sandbox policy: a plain serde type hosts can load from config.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How much a command or an edit may touch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read anything, write nothing (but `/dev/null` and the terminal).
    #[default]
    ReadOnly,
    /// Read anything, write inside the writable roots (the workspace, extra
    /// roots, and `/tmp` / `$TMPDIR` unless turned off), `.git` excepted.
    WorkspaceWrite,
    /// No sandbox at all.
    DangerFullAccess,
}

impl SandboxMode {
    /// Every mode, narrowest first.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// The kebab-case name, as in config files and messages.
    ///
    /// ```
    /// assert_eq!(dsh_sandbox::SandboxMode::WorkspaceWrite.name(), "workspace-write");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Parses a kebab-case name.
    pub fn from_name(name: &str) -> Option<SandboxMode> {
        match name {
            "read-only" => Some(SandboxMode::ReadOnly),
            "workspace-write" => Some(SandboxMode::WorkspaceWrite),
            "danger-full-access" => Some(SandboxMode::DangerFullAccess),
            _ => None,
        }
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the sandbox allows. Deserializes from config such as
/// `{"mode": "workspace-write", "writable_roots": ["/data"], "network": false,
/// "tmp_size": 67108864}`.
///
/// ```
/// use dsh_sandbox::{SandboxMode, SandboxPolicy};
/// let policy: SandboxPolicy = serde_json::from_str(r#"{"mode": "workspace-write"}"#).unwrap();
/// assert_eq!(policy.mode, SandboxMode::WorkspaceWrite);
/// assert!(policy.tmp_writable && !policy.network && !policy.git_writable);
/// // Or in code: the defaults and a setter per field.
/// let policy = SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite).network(true);
/// assert!(policy.network);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SandboxPolicy {
    /// The host's default mode for owners that have none of their own.
    pub mode: SandboxMode,
    /// Writable roots besides the workspace (workspace-write only).
    pub writable_roots: Vec<PathBuf>,
    /// Keep `/tmp` and `$TMPDIR` writable in workspace-write (default `true`).
    pub tmp_writable: bool,
    /// Let `.git` inside writable roots be written (default `false`).
    pub git_writable: bool,
    /// Allow network access in the restricted modes (default `false`).
    pub network: bool,
    /// Where namespaces cannot be created, run in the weaker mode
    /// (capabilities dropped, Landlock and seccomp, but the host's process
    /// table and filesystem view) and report what is missing, instead of
    /// failing closed (default `false`).
    pub degrade: bool,
    /// Linux: let this bubblewrap program (`bwrap`, looked up on `PATH`
    /// without a `/`) build the namespaces and the filesystem view with
    /// equivalent flags, instead of the built-in code (default: none). The
    /// seccomp layer is the same; Landlock is not applied (bubblewrap's own
    /// mounts would be refused under it).
    pub bubblewrap: Option<PathBuf>,
    /// Pathname Unix sockets, or directories of them, that confined
    /// processes may connect to (and send to) besides those beneath the
    /// writable roots and the private `/tmp` (default: none). Every other
    /// socket the filesystem view shows — a Docker, systemd or ssh-agent
    /// socket — is refused with `Permission denied`, including sockets that
    /// appear after the shell started.
    pub unix_sockets: Vec<PathBuf>,
    /// Paths the restricted modes hide from the shell and the editor: a
    /// directory shows empty, a file empty and read-only (`~/` is the
    /// server's `$HOME`), by name for the sandbox's life: what the host
    /// later renames over one, re-creates or makes under a name that did
    /// not exist at start is hidden too (on Linux 5.11 and later, outside
    /// the workspace and writable roots, not under bubblewrap; see
    /// `docs/sandbox.md`). The default,
    /// [`SandboxPolicy::default_hidden_paths`], lists the usual credential
    /// stores; a host replaces the list by setting it (an empty list hides
    /// nothing). A hidden directory that holds the workspace or a writable
    /// root still shows that root.
    pub hidden_paths: Vec<PathBuf>,
    /// The most the restricted modes' private `/tmp` (and `/dev/shm`) may
    /// hold, in bytes: its tmpfs's `size=` (default: none, the kernel's
    /// half of the RAM). Danger-full-access and the weaker mode have no
    /// private `/tmp`: there it cannot be kept, and a shell is refused
    /// unless the shell's limits are best effort
    /// ([`dsh_pty::ResourceLimits::best_effort`]), as one of theirs would be;
    /// [`Enforcement::tmp_limits`](crate::Enforcement::tmp_limits) says how
    /// it is kept.
    pub tmp_size: Option<u64>,
    /// The most files and directories the private `/tmp` may hold: its
    /// tmpfs's `nr_inodes=` (default: none). As
    /// [`SandboxPolicy::tmp_size`]; bubblewrap cannot bound it either.
    pub tmp_inodes: Option<u64>,
    /// The hosts the restricted modes reach by name, through the host's
    /// egress proxy (default: none). Each entry is `HOST[:PORT]` or
    /// `*.DOMAIN[:PORT]` (subdomains only; without a port, 80 and 443; an
    /// IP literal only as itself). With entries, the confined shell still
    /// has no network of its own: its HTTP and HTTPS go through a proxy at
    /// `127.0.0.1:3128` inside ([`egress_env`](crate::egress_env)), which
    /// answers 403 for anything not listed. Linux with namespaces and the
    /// crate's `egress` feature; refused with `network`, in
    /// danger-full-access as the default mode, and under bubblewrap.
    pub allow_domains: Vec<String>,
}

/// The credential stores hidden by default (see
/// [`SandboxPolicy::default_hidden_paths`]).
const DEFAULT_HIDDEN: [&str; 28] = [
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.config/hub",
    "~/.docker",
    "~/.kube",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.npmrc",
    "~/.yarnrc",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.gem/credentials",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.vault-token",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
];

impl SandboxPolicy {
    /// The default [`SandboxPolicy::hidden_paths`]: the server user's SSH,
    /// GnuPG, cloud (AWS, Azure, Google Cloud), GitHub, Docker, Kubernetes,
    /// netrc, git, npm, yarn, PyPI, Cargo, RubyGems, `pass`, keyring and
    /// Vault credentials under `~`, and the host's `/etc/shadow`,
    /// `/etc/gshadow` (and their backups) and SSH host keys.
    ///
    /// ```
    /// let hidden = dsh_sandbox::SandboxPolicy::default_hidden_paths();
    /// assert!(hidden.iter().any(|p| p.as_os_str() == "~/.ssh"));
    /// assert!(hidden.iter().any(|p| p.as_os_str() == "/etc/shadow"));
    /// ```
    pub fn default_hidden_paths() -> Vec<PathBuf> {
        DEFAULT_HIDDEN.iter().map(PathBuf::from).collect()
    }
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            writable_roots: Vec::new(),
            tmp_writable: true,
            git_writable: false,
            network: false,
            degrade: false,
            bubblewrap: None,
            unix_sockets: Vec::new(),
            hidden_paths: SandboxPolicy::default_hidden_paths(),
            tmp_size: None,
            tmp_inodes: None,
            allow_domains: Vec::new(),
        }
    }
}

dsh_pty::setters!(SandboxPolicy {
    mode: SandboxMode,
    writable_roots: Vec<PathBuf>,
    tmp_writable: bool,
    git_writable: bool,
    network: bool,
    degrade: bool,
    bubblewrap: Option<PathBuf>,
    unix_sockets: Vec<PathBuf>,
    hidden_paths: Vec<PathBuf>,
    tmp_size: Option<u64>,
    tmp_inodes: Option<u64>,
    allow_domains: Vec<String>,
});

/// The resolved write rules of one mode for one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteRules {
    /// The mode.
    pub mode: SandboxMode,
    /// Canonical directories under which writing is allowed: the workspace
    /// and the policy's extra roots (workspace-write only).
    pub roots: Vec<PathBuf>,
    /// Paths of those roots that stay read-only, whether they exist yet or
    /// not: each root's `.git` as named, the target of a `.git` symlink, and
    /// for a `gitdir:` file its git directory and that directory's common
    /// directory (where a worktree's hooks live); for a root whose `.git`
    /// is missing or no git directory, its `HEAD` (with it, `objects/` and
    /// `refs/` would make the root a bare repository to the host's git),
    /// and where that `HEAD` is already the user's valid one, its
    /// `objects`, `refs` and `commondir`.
    pub protected: Vec<PathBuf>,
    /// Whether the shell's private `/tmp` is writable.
    pub tmp: bool,
    /// The policy's hidden paths as the sandbox hides them for its whole
    /// life, whether they exist or not: `~/` expanded, the directory holding
    /// each resolved as it was when these rules were made (symlinks of its
    /// existing part followed, the rest lexically) and the name kept as
    /// given, plus the target of a hidden path that was a symbolic link
    /// then. Hiding is by these names: whatever the host later puts there
    /// (a file renamed over, a directory removed and made again, a store
    /// created after start) is hidden too.
    pub hidden: Vec<PathBuf>,
    /// The roots and the workspace: shown even beneath a hidden path.
    pub(crate) shown: Vec<PathBuf>,
}

impl WriteRules {
    /// The rules of `mode` for `workspace` under `policy`. Roots that do not
    /// exist are left out; roots are canonical (symlinks resolved).
    pub fn new(policy: &SandboxPolicy, mode: SandboxMode, workspace: &Path) -> WriteRules {
        let mut roots = Vec::new();
        if mode == SandboxMode::WorkspaceWrite {
            roots.push(workspace.to_owned());
            roots.extend(policy.writable_roots.iter().cloned());
        }
        let mut roots: Vec<PathBuf> = roots
            .into_iter()
            .filter_map(|r| std::fs::canonicalize(r).ok())
            .collect();
        roots.sort();
        roots.dedup();
        let mut protected = Vec::new();
        if !policy.git_writable {
            for root in &roots {
                protected.extend(git_paths(root));
            }
        }
        protected.sort();
        protected.dedup();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut hidden: Vec<PathBuf> = policy
            .hidden_paths
            .iter()
            .filter_map(|p| expand_home(p, home.as_deref()))
            .flat_map(|p| hidden_names(&p))
            .filter(|p| p.as_os_str() != "/")
            .collect();
        hidden.sort();
        hidden.dedup();
        let mut shown = roots.clone();
        shown.extend(std::fs::canonicalize(workspace).ok());
        WriteRules {
            mode,
            roots,
            protected,
            tmp: mode == SandboxMode::WorkspaceWrite && policy.tmp_writable,
            hidden,
            shown,
        }
    }

    /// Whether `path` (resolved first, as in [`WriteRules::allows`]) lies
    /// in a hidden path of the restricted modes.
    pub fn hides(&self, path: &Path) -> bool {
        if self.mode == SandboxMode::DangerFullAccess || self.hidden.is_empty() {
            return false;
        }
        self.hides_resolved(path, &resolve(path).unwrap_or_else(|| path.to_owned()))
    }

    /// [`WriteRules::hides`] for a `path` already resolved to `real`.
    pub(crate) fn hides_resolved(&self, path: &Path, real: &Path) -> bool {
        if self.mode == SandboxMode::DangerFullAccess {
            return false;
        }
        let plain_real = plain(real.as_os_str().as_encoded_bytes());
        let plain_path = plain(path.as_os_str().as_encoded_bytes());
        self.hidden.iter().any(|h| {
            (starts_with(real, plain_real, h) || starts_with(path, plain_path, h))
                && !self
                    .shown
                    .iter()
                    .any(|r| r.starts_with(h) && real.starts_with(r))
        })
    }

    /// Whether writing `path` is allowed. `path` is resolved first: symlinks
    /// of the existing part, then `.` and `..` of the rest.
    pub fn allows(&self, path: &Path) -> bool {
        match self.mode {
            SandboxMode::DangerFullAccess => true,
            SandboxMode::ReadOnly => false,
            SandboxMode::WorkspaceWrite => {
                let Some(real) = resolve(path) else {
                    return false;
                };
                self.roots.iter().any(|r| real.starts_with(r))
                    && !self.protected.iter().any(|g| real.starts_with(g))
            }
        }
    }
}

/// Whether `path` is absolute and spelled as its components are: no
/// empty, `.` or `..` component, no `/` at its end (and, on Windows, no
/// `\`). Between two such paths, [`Path::starts_with`] (which compares
/// components) is a comparison of bytes ending at a `/`.
fn plain(path: &[u8]) -> bool {
    path == b"/"
        || path.first() == Some(&b'/')
            && !(cfg!(windows) && path.contains(&b'\\'))
            && path[1..]
                .split(|b| *b == b'/')
                .all(|c| !c.is_empty() && c != b"." && c != b"..")
}

/// [`Path::starts_with`], by bytes where both paths are [`plain`].
fn starts_with(path: &Path, path_plain: bool, prefix: &Path) -> bool {
    let (p, q) = (
        path.as_os_str().as_encoded_bytes(),
        prefix.as_os_str().as_encoded_bytes(),
    );
    if !(path_plain && plain(q)) {
        return path.starts_with(prefix);
    }
    p.starts_with(q) && (p.len() == q.len() || q == b"/" || p[q.len()] == b'/')
}

/// `path` with a leading `~` replaced by `home`; `None` for a `~` path
/// when there is no home.
pub(crate) fn expand_home(path: &Path, home: Option<&Path>) -> Option<PathBuf> {
    match path.strip_prefix("~") {
        Ok(rest) => home.map(|h| h.join(rest)),
        Err(_) => Some(path.to_owned()),
    }
}

/// What hiding `path` hides: `path` with its directory resolved (see
/// [`resolve`]) and its own name kept, and where `path` is a symbolic link
/// now, also what it points to. Empty for a relative path or one whose
/// directory climbs out of nothing.
pub(crate) fn hidden_names(path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let named = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => resolve(parent).map(|p| p.join(name)),
        _ => resolve(path),
    };
    out.extend(named);
    if let Ok(real) = std::fs::canonicalize(path)
        && !out.contains(&real)
    {
        out.push(real);
    }
    out
}

/// The git paths of `root` to keep read-only (see [`WriteRules::protected`]).
pub(crate) fn git_paths(root: &Path) -> Vec<PathBuf> {
    let git = root.join(".git");
    let mut out = vec![git.clone()];
    let git_dir = match std::fs::symlink_metadata(&git) {
        Ok(meta) if meta.is_symlink() => std::fs::canonicalize(&git).ok(),
        Ok(meta) if meta.is_file() => std::fs::read_to_string(&git).ok().and_then(|text| {
            let dir = text.lines().next()?.strip_prefix("gitdir:")?.trim();
            std::fs::canonicalize(root.join(dir)).ok()
        }),
        Ok(meta) if meta.is_dir() => Some(git.clone()),
        _ => None,
    };
    // A `.git` that is no git directory (missing, empty — as a crash may
    // leave the placeholder —, a file naming nothing) does not stop git's
    // search: it would take the root itself for a bare repository if a
    // valid `HEAD`, `objects/` and `refs/` appeared there. `HEAD` is kept.
    if !git_dir.as_deref().is_some_and(is_git_dir) {
        let head = root.join("HEAD");
        // A `HEAD` of the user's that git already reads as one (the root is
        // half a bare repository): what would complete it is kept too.
        if valid_head(&head) {
            out.extend(BARE_REST.iter().map(|name| root.join(name)));
        }
        out.push(head);
    }
    if let Some(dir) = git_dir.filter(|d| *d != git) {
        if let Some(common) = std::fs::read_to_string(dir.join("commondir"))
            .ok()
            .and_then(|c| std::fs::canonicalize(dir.join(c.trim())).ok())
        {
            out.push(common);
        }
        out.push(dir);
    }
    out
}

/// What, beside a valid `HEAD`, makes a directory a bare repository to
/// git: its `objects/` and `refs/`, or a `commondir` file naming where
/// they are.
pub(crate) const BARE_REST: [&str; 3] = ["commondir", "objects", "refs"];

/// Whether git would take the file at `head` for a repository's `HEAD`: a
/// symbolic link, a `ref:` or an object id (as git's `validate_headref`).
fn valid_head(head: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(head) else {
        return false;
    };
    if meta.is_symlink() {
        return true;
    }
    if !meta.is_file() {
        return false;
    }
    let mut start = [0u8; 256];
    let n = std::fs::File::open(head)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut start))
        .unwrap_or(0);
    let text = &start[..n];
    let first = text.split(|b| *b == b'\n').next().unwrap_or_default();
    text.starts_with(b"ref:") || (first.len() >= 40 && first.iter().all(u8::is_ascii_hexdigit))
}

/// Whether git could take `dir` for a git directory: it has a `HEAD`
/// that is not a directory (git reads it as a file or a symlink).
fn is_git_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("HEAD")).is_ok_and(|m| !m.is_dir())
}

/// The real path `path` names: its longest existing prefix canonicalized
/// (symlinks resolved), then the rest resolved lexically.
pub fn resolve(path: &Path) -> Option<PathBuf> {
    resolve_with(path, &|p| std::fs::canonicalize(p))
}

/// [`resolve`] with links resolved by `canonicalize` (in another view of
/// the filesystem: a copy-on-write workspace's).
pub(crate) fn resolve_with(
    path: &Path,
    canonicalize: &dyn Fn(&Path) -> std::io::Result<PathBuf>,
) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut existing = path.to_owned();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let base = loop {
        if let Ok(real) = canonicalize(&existing) {
            break real;
        }
        let name = existing.file_name()?.to_owned();
        rest.push(name);
        if !existing.pop() {
            return None;
        }
    };
    // `file_name` never yields `.` or `..`, so `rest` holds plain names: a
    // path that climbs out of a directory that does not exist yet has no
    // resolution and is refused.
    let mut out = base;
    for part in rest.iter().rev() {
        out.push(part);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_prefix_test_is_path_starts_with() {
        let paths = [
            "/home/u/.ssh",
            "/home/u/.ssh/id",
            "/home/u//.ssh/./id",
            "/home/u/.sshx",
            "/home/u/x/.ssh",
            "/home/u/.ssh/",
            "/home/u/.ss",
            "/etc/shadow-",
            "/etc/shadow",
            "/",
            "//",
            "",
            "/home/u/../u/.ssh",
            "/home/u/..",
            "/a/b/.",
            "/a/./b",
            "relative/.ssh",
        ];
        for p in paths {
            for h in paths {
                let (p, h) = (Path::new(p), Path::new(h));
                let plain_p = plain(p.as_os_str().as_encoded_bytes());
                assert_eq!(starts_with(p, plain_p, h), p.starts_with(h), "{p:?} {h:?}");
            }
        }
    }

    #[test]
    fn hidden_paths_expand_home_and_keep_what_exists() {
        let home = Path::new("/home/agent");
        assert_eq!(
            expand_home(Path::new("~/.ssh"), Some(home)),
            Some(PathBuf::from("/home/agent/.ssh"))
        );
        assert_eq!(expand_home(Path::new("~/.ssh"), None), None);
        assert_eq!(
            expand_home(Path::new("~alice/x"), Some(home)),
            Some(PathBuf::from("~alice/x"))
        );
        assert_eq!(
            expand_home(Path::new("/etc/shadow"), Some(home)),
            Some(PathBuf::from("/etc/shadow"))
        );
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(ws.join("secret")).unwrap();
        let policy = SandboxPolicy::default().hidden_paths(vec![
            ws.join("secret"),
            ws.join("missing"),
            PathBuf::from("/"),
        ]);
        let rules = WriteRules::new(&policy, SandboxMode::WorkspaceWrite, &ws);
        // Hiding is by name: a path that does not exist yet is hidden too.
        assert_eq!(rules.hidden, [ws.join("missing"), ws.join("secret")]);
        assert!(rules.hides(&ws.join("secret/key")));
        assert!(rules.hides(&ws.join("missing")));
        std::fs::write(ws.join("missing"), "made later").unwrap();
        assert!(rules.hides(&ws.join("missing")));
        // A hidden symbolic link hides its name and what it points to.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(ws.join("secret"), ws.join("link")).unwrap();
            let linked = SandboxPolicy::default().hidden_paths(vec![ws.join("link")]);
            let rules = WriteRules::new(&linked, SandboxMode::WorkspaceWrite, &ws);
            assert_eq!(rules.hidden, [ws.join("link"), ws.join("secret")]);
        }
        assert!(!rules.hides(&ws.join("public")));
        // A hidden directory holding the workspace still shows the workspace.
        let outer = SandboxPolicy::default().hidden_paths(vec![ws.clone()]);
        let nested = ws.join("secret");
        let rules = WriteRules::new(&outer, SandboxMode::WorkspaceWrite, &nested);
        assert!(rules.hides(&ws.join("other")));
        assert!(!rules.hides(&nested.join("file")));
        let full = WriteRules::new(&outer, SandboxMode::DangerFullAccess, &nested);
        assert!(!full.hides(&ws.join("other")));
    }

    #[test]
    fn modes_round_trip_through_serde_in_kebab_case() {
        for mode in [
            SandboxMode::ReadOnly,
            SandboxMode::WorkspaceWrite,
            SandboxMode::DangerFullAccess,
        ] {
            let text = serde_json::to_string(&mode).unwrap();
            assert_eq!(text, format!("\"{}\"", mode.name()));
            assert_eq!(serde_json::from_str::<SandboxMode>(&text).unwrap(), mode);
            assert_eq!(SandboxMode::from_name(mode.name()), Some(mode));
        }
        assert!(SandboxMode::ReadOnly < SandboxMode::WorkspaceWrite);
        assert!(SandboxMode::WorkspaceWrite < SandboxMode::DangerFullAccess);
        assert!(serde_json::from_str::<SandboxPolicy>(r#"{"mode": "yolo"}"#).is_err());
        assert!(serde_json::from_str::<SandboxPolicy>(r#"{"surprise": 1}"#).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn resolution_follows_links_and_refuses_climbing_out_of_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        assert_eq!(
            resolve(&root.join("link/new/file")),
            Some(root.join("real/new/file"))
        );
        assert_eq!(
            resolve(&root.join("real/../real/x")),
            Some(root.join("real/x"))
        );
        assert_eq!(resolve(&root.join("missing/../../etc/passwd")), None);
        assert_eq!(resolve(Path::new("relative")), None);

        let policy = SandboxPolicy::default().tmp_writable(false);
        let rules = WriteRules::new(&policy, SandboxMode::WorkspaceWrite, &root.join("real"));
        assert!(rules.allows(&root.join("link/src/main.rs")));
        assert!(!rules.allows(&root.join("real/.git/config")));
        assert!(!rules.allows(&root.join("outside.txt")));
        assert!(
            !WriteRules::new(&policy, SandboxMode::ReadOnly, &root).allows(&root.join("real/x"))
        );
        assert!(
            WriteRules::new(&policy, SandboxMode::DangerFullAccess, &root)
                .allows(Path::new("/etc/x"))
        );
    }
}
