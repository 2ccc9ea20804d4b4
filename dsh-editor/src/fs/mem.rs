//! An in-memory filesystem.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{DirEntry, FileKind, Fs, FsError, Metadata, Version};

#[derive(Debug, Clone)]
enum Node {
    File {
        data: Vec<u8>,
        mode: u32,
        version: u64,
    },
    Dir,
}

#[derive(Debug, Default)]
struct Tree {
    nodes: BTreeMap<PathBuf, Node>,
    next_version: u64,
}

/// An in-memory filesystem of files and directories (no links), for hosts
/// that keep files virtual and for fast tests. The root `/` always exists.
/// Every write bumps the file's version, so [`Fs::replace`] detects any
/// change made in between.
///
/// ```
/// # tokio_test_block_on(async {
/// use dsh_editor::fs::{Fs, MemFs};
/// use std::path::Path;
/// let fs = MemFs::new();
/// fs.create_new(Path::new("/src/main.rs"), b"fn main() {}\n".to_vec()).await.unwrap();
/// assert_eq!(fs.get(Path::new("/src/main.rs")).unwrap(), b"fn main() {}\n");
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemFs {
    tree: Mutex<Tree>,
}

/// `path` with `.` and `..` resolved lexically.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

impl MemFs {
    /// An empty filesystem holding only `/`.
    pub fn new() -> Self {
        MemFs::default()
    }

    fn lock(&self) -> MutexGuard<'_, Tree> {
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        tree.nodes.entry(PathBuf::from("/")).or_insert(Node::Dir);
        tree
    }

    /// The content of the file at `path`, if there is one.
    pub fn get(&self, path: &Path) -> Option<Vec<u8>> {
        match self.lock().nodes.get(&normal(path)) {
            Some(Node::File { data, .. }) => Some(data.clone()),
            _ => None,
        }
    }

    /// Writes a file unconditionally (creating parents), as another writer would.
    pub fn put(&self, path: &Path, data: impl Into<Vec<u8>>) {
        let path = normal(path);
        let mut tree = self.lock();
        make_parents(&mut tree, &path);
        tree.next_version += 1;
        let version = tree.next_version;
        let mode = match tree.nodes.get(&path) {
            Some(Node::File { mode, .. }) => *mode,
            _ => 0o644,
        };
        tree.nodes.insert(
            path,
            Node::File {
                data: data.into(),
                mode,
                version,
            },
        );
    }

    /// Creates a directory and its parents.
    pub fn mkdir(&self, path: &Path) {
        let path = normal(path);
        let mut tree = self.lock();
        make_parents(&mut tree, &path);
        tree.nodes.insert(path, Node::Dir);
    }

    /// Sets the permission bits of a file.
    pub fn set_mode(&self, path: &Path, new_mode: u32) {
        if let Some(Node::File { mode, .. }) = self.lock().nodes.get_mut(&normal(path)) {
            *mode = new_mode;
        }
    }
}

fn make_parents(tree: &mut Tree, path: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        tree.nodes.entry(d.to_owned()).or_insert(Node::Dir);
        dir = d.parent();
    }
}

#[async_trait]
impl Fs for MemFs {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        match self.lock().nodes.get(&normal(path)) {
            Some(Node::File {
                data,
                mode,
                version,
            }) => Ok(Metadata {
                kind: FileKind::File,
                is_symlink: false,
                len: data.len() as u64,
                mode: Some(*mode),
                version: Version(vec![*version]),
            }),
            Some(Node::Dir) => Ok(Metadata {
                kind: FileKind::Directory,
                is_symlink: false,
                len: 0,
                mode: Some(0o755),
                version: Version(vec![0]),
            }),
            None => Err(FsError::NotFound(path.to_owned())),
        }
    }

    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        match self.lock().nodes.get(&normal(path)) {
            Some(Node::File { data, version, .. }) => {
                FsError::check_len(path, data.len() as u64, limit)?;
                Ok((data.clone(), Version(vec![*version])))
            }
            Some(Node::Dir) => Err(FsError::Io {
                path: path.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
            }),
            None => Err(FsError::NotFound(path.to_owned())),
        }
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        let dir = normal(path);
        let tree = self.lock();
        match tree.nodes.get(&dir) {
            Some(Node::Dir) => {}
            Some(Node::File { .. }) => {
                return Err(FsError::Io {
                    path: path.to_owned(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotADirectory,
                        "not a directory",
                    ),
                });
            }
            None => return Err(FsError::NotFound(path.to_owned())),
        }
        Ok(tree
            .nodes
            .range(dir.clone()..)
            .skip(1)
            .take_while(|(p, _)| p.starts_with(&dir))
            .filter(|(p, _)| p.parent() == Some(dir.as_path()))
            .filter_map(|(p, node)| {
                Some(DirEntry {
                    name: p.file_name()?.to_owned(),
                    kind: match node {
                        Node::File { .. } => FileKind::File,
                        Node::Dir => FileKind::Directory,
                    },
                    is_symlink: false,
                })
            })
            .collect())
    }

    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        let p = normal(path);
        let mut tree = self.lock();
        if tree.nodes.contains_key(&p) {
            return Err(FsError::AlreadyExists(path.to_owned()));
        }
        make_parents(&mut tree, &p);
        tree.next_version += 1;
        let version = tree.next_version;
        tree.nodes.insert(
            p,
            Node::File {
                data,
                mode: 0o644,
                version,
            },
        );
        Ok(())
    }

    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        let p = normal(path);
        let mut tree = self.lock();
        tree.next_version += 1;
        let next = tree.next_version;
        match tree.nodes.get_mut(&p) {
            Some(Node::File {
                data: content,
                version,
                ..
            }) => {
                if Version(vec![*version]) != *expected {
                    return Err(FsError::Changed(path.to_owned()));
                }
                *content = data;
                *version = next;
                Ok(Version(vec![next]))
            }
            Some(Node::Dir) => Err(FsError::Io {
                path: path.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
            }),
            None => Err(FsError::NotFound(path.to_owned())),
        }
    }
}
