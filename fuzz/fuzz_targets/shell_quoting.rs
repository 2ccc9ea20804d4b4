//! A quoted random string round-trips through real bash `printf %s` exactly.
#![no_main]

use dsh_shell_persistent::__private::bash_ansi_c;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if s.contains('\0') || s.len() > 512 {
        return; // no shell string can hold NUL
    }
    let out = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &format!("printf %s {}", bash_ansi_c(s))])
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, s.as_bytes(), "quoted: {}", bash_ansi_c(s));
});
