//! What the sandbox's integration tests share.

/// A directory for test files that a confined shell can see wherever the
/// checkout lives: the shell's `/tmp` is private, so not under `/tmp`.
pub(crate) fn visible_tmp() -> std::path::PathBuf {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    if !target.starts_with("/tmp") {
        return target.to_owned();
    }
    let var_tmp = std::path::PathBuf::from("/var/tmp");
    assert!(
        var_tmp.is_dir(),
        "the checkout is under /tmp, which confined shells do not see, and /var/tmp is missing"
    );
    var_tmp
}
