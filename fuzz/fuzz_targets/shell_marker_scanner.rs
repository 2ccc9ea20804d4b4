//! The marker scanner on arbitrary output cut into arbitrary chunks: the
//! command's output is recovered exactly and the status read.
#![no_main]

use dsh_shell_persistent::__private::{CallScanner, Markers, Progress, Prompt};
use libfuzzer_sys::fuzz_target;

const S: &str = "0123456789abcdef0123456789abcdee";
const E: &str = "0123456789abcdeffedcba9876543211";

fuzz_target!(|data: &[u8]| {
    let Some((&status, rest)) = data.split_first() else {
        return;
    };
    let Some((&cut_seed, output)) = rest.split_first() else {
        return;
    };
    let mut with_end = output.to_vec();
    with_end.extend_from_slice(E.as_bytes());
    if memchr::memmem::find(&with_end, E.as_bytes()) != Some(output.len()) {
        return; // the output itself forms the end marker: not a valid case
    }
    let mut stream = b"noise".to_vec();
    stream.extend_from_slice(S.as_bytes());
    stream.extend_from_slice(output);
    stream.extend_from_slice(E.as_bytes());
    stream.extend_from_slice(format!("{status}#").as_bytes());

    let mut scanner = CallScanner::new(Markers {
        prefix: S[..16].into(),
        start: S[16..].into(),
        end: E[16..].into(),
        ..Markers::default()
    });
    let mut got = Vec::new();
    let mut progress = Progress::Pending;
    let step = usize::from(cut_seed % 37) + 1;
    for chunk in stream.chunks(step) {
        progress = scanner.feed(chunk, &mut |b| got.extend_from_slice(b));
        if progress != Progress::Pending {
            break;
        }
    }
    assert_eq!(
        progress,
        Progress::Prompt {
            which: Prompt::End,
            tag: String::new(),
            status: Some(i32::from(status))
        }
    );
    assert_eq!(got, output);
});
