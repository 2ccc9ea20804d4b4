//! Whether every filesystem mounted on this machine is a local one: the
//! condition for [`BlockingFs::reads_quickly`](super::BlockingFs::reads_quickly)
//! on this machine's files.

use std::sync::OnceLock;

/// Filesystems whose operations wait on nothing but this machine's disks
/// and memory. Anything else (NFS, SMB, FUSE, 9p, virtiofs, autofs, ...)
/// can block for as long as a network or another process takes.
const LOCAL: &[&str] = &[
    "ext2",
    "ext3",
    "ext4",
    "xfs",
    "btrfs",
    "f2fs",
    "zfs",
    "vfat",
    "exfat",
    "squashfs",
    "iso9660",
    "tmpfs",
    "ramfs",
    "overlay",
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "nsfs",
    "mqueue",
    "hugetlbfs",
    "bpf",
    "tracefs",
    "debugfs",
    "securityfs",
    "pstore",
    "configfs",
    "efivarfs",
    "binfmt_misc",
    "fusectl",
];

/// `true` when this process's mount table holds only [`LOCAL`]
/// filesystems, read once (the first time it is asked); `false` where it
/// cannot be read, and off Linux.
pub(crate) fn only_local() -> bool {
    static ONLY_LOCAL: OnceLock<bool> = OnceLock::new();
    *ONLY_LOCAL.get_or_init(|| {
        if !cfg!(target_os = "linux") {
            return false;
        }
        std::fs::read_to_string("/proc/self/mountinfo")
            .map(|table| all_local(&table))
            .unwrap_or(false)
    })
}

/// Whether every line of a `mountinfo` table names a [`LOCAL`] filesystem
/// (its type is the first field after ` - `).
fn all_local(table: &str) -> bool {
    let mut any = false;
    for line in table.lines() {
        let Some((_, after)) = line.split_once(" - ") else {
            return false;
        };
        let Some(kind) = after.split_whitespace().next() else {
            return false;
        };
        if !LOCAL.contains(&kind) {
            return false;
        }
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_or_fuse_mount_anywhere_makes_the_table_not_local() {
        let local = "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                     23 22 0:21 / /tmp rw - tmpfs tmpfs rw\n";
        assert!(all_local(local));
        let nfs = format!("{local}40 22 0:50 / /mnt/data rw - nfs4 srv:/data rw\n");
        assert!(!all_local(&nfs));
        let fuse = format!("{local}41 22 0:51 / /mnt/s rw - fuse.sshfs me@h: rw\n");
        assert!(!all_local(&fuse));
        assert!(!all_local(""));
        assert!(!all_local("garbage line\n"));
    }
}
