//! Removing job status notices (`[1]+  Done  sleep 1`) from a result.
//!
//! An interactive shell prints them on its own standard error whenever a
//! foreground command ends or a prompt is due, so they land inside whichever
//! call is running. The start line of a job (`[1] 12345`) is kept: it tells
//! the model the job's process id.

use memchr::memmem;

/// A line starting with `[` is held until its end, then dropped if it is a
/// notice; longer lines than this are passed on unexamined.
const MAX_NOTICE: usize = 1024;

/// The status words of a notice: bash's and the C library's signal
/// descriptions (`strsignal`).
const STATUSES: &[&str] = &[
    "Done",
    "Exit ",
    "Stopped",
    "Terminated",
    "Killed",
    "Hangup",
    "Interrupt",
    "Quit",
    "Aborted",
    "Segmentation fault",
    "Broken pipe",
    "Alarm clock",
    "User defined signal",
    "Bus error",
    "Illegal instruction",
    "Floating point exception",
    "Trace/breakpoint trap",
    "CPU time limit exceeded",
    "File size limit exceeded",
    "Real-time signal",
    "Unknown signal",
    "Profiling timer expired",
    "Virtual timer expired",
    "Bad system call",
];

/// `true` for a job status notice line (without its newline).
fn is_notice(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('[') else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let Some(rest) = rest[digits..].strip_prefix(']') else {
        return false;
    };
    let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    let trimmed = rest.trim_start_matches(' ');
    if trimmed.len() == rest.len() {
        return false;
    }
    STATUSES.iter().any(|status| {
        trimmed.strip_prefix(status).is_some_and(|after| {
            status.ends_with(' ') || after.is_empty() || after.starts_with([' ', '('])
        })
    })
}

/// A streaming filter over normalized text.
#[derive(Debug)]
pub(crate) struct NoticeFilter {
    line_start: bool,
    held: Option<String>,
}

impl NoticeFilter {
    pub(crate) fn new() -> Self {
        NoticeFilter {
            line_start: true,
            held: None,
        }
    }

    pub(crate) fn push(&mut self, mut text: &str, sink: &mut dyn FnMut(&str)) {
        while !text.is_empty() {
            if let Some(held) = &mut self.held {
                match memchr::memchr(b'\n', text.as_bytes()) {
                    Some(i) => {
                        held.push_str(&text[..i]);
                        text = &text[i + 1..];
                        if !is_notice(held) {
                            held.push('\n');
                            sink(held);
                        }
                        self.held = None;
                        self.line_start = true;
                    }
                    None => {
                        held.push_str(text);
                        if held.len() > MAX_NOTICE {
                            sink(held);
                            self.held = None;
                            self.line_start = false;
                        }
                        return;
                    }
                }
            } else if self.line_start && text.starts_with('[') {
                self.held = Some(String::new());
            } else {
                // Pass on everything up to the next line that starts with `[`.
                match memmem::find(text.as_bytes(), b"\n[") {
                    Some(i) => {
                        sink(&text[..=i]);
                        text = &text[i + 1..];
                        self.line_start = true;
                    }
                    None => {
                        sink(text);
                        self.line_start = text.ends_with('\n');
                        return;
                    }
                }
            }
        }
    }

    /// The text ended: a held line without its newline is not a notice.
    pub(crate) fn finish(&mut self, sink: &mut dyn FnMut(&str)) {
        if let Some(held) = self.held.take() {
            sink(&held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(chunks: &[&str]) -> String {
        let mut f = NoticeFilter::new();
        let mut out = String::new();
        for c in chunks {
            f.push(c, &mut |s| out.push_str(s));
        }
        f.finish(&mut |s| out.push_str(s));
        out
    }

    #[test]
    fn notices_go_and_everything_else_stays() {
        let text = "[1] 4242\n[1]+  Done                    sleep 0.3\nwaited\n[2]-  Exit 3                  ( exit 3 )\n[3]   Terminated              sleep 9\n[12]+  Killed                  x\n[1]+  Stopped (SIGTSTP)        vim\n[1]+  Running                 sleep 9 &\n[x] Done\n[1]Done\narr[1]+  Done\n[1]+  Donewell\n[1]+  Done";
        let want = "[1] 4242\nwaited\n[1]+  Running                 sleep 9 &\n[x] Done\n[1]Done\narr[1]+  Done\n[1]+  Donewell\n[1]+  Done";
        assert_eq!(filter(&[text]), want);
        // Cut at every position, the result is the same.
        for cut in 0..text.len() {
            if text.is_char_boundary(cut) {
                assert_eq!(filter(&[&text[..cut], &text[cut..]]), want, "cut {cut}");
            }
        }
    }

    #[test]
    fn long_lines_pass_unexamined() {
        let long = format!("[{}\n", "1".repeat(2000));
        assert_eq!(filter(&[&long]), long);
    }
}
