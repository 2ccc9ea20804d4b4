//! What the tool checks about the shell process itself while a call runs:
//! whether another program replaced it (`exec`) and whether it was stopped.
//! Linux reads `/proc/<pid>` when the shell's process ids are this host's;
//! elsewhere (and for shells on other hosts) both answers are `false`.

#[cfg(target_os = "linux")]
use std::path::PathBuf;

/// Whether [`dsh_pty::Foreground::waiting_for_input`] is informative here.
pub(crate) const SEES_READS: bool = cfg!(target_os = "linux");

/// The shell's own process group, learned while the shell sat at its first
/// prompt, and the program it ran then.
#[derive(Debug, Clone)]
pub(crate) struct Home {
    pgid: i32,
    /// The shell's process is in this host's `/proc`.
    #[cfg(target_os = "linux")]
    local: bool,
    #[cfg(target_os = "linux")]
    exe: Option<PathBuf>,
}

impl Home {
    pub(crate) fn new(pgid: i32, local: bool) -> Home {
        #[cfg(not(target_os = "linux"))]
        let _ = local;
        Home {
            pgid,
            #[cfg(target_os = "linux")]
            local,
            #[cfg(target_os = "linux")]
            exe: local
                .then(|| std::fs::read_link(format!("/proc/{pgid}/exe")).ok())
                .flatten(),
        }
    }

    /// The process group in front of the terminal while the shell is at its prompt.
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid
    }

    /// `true` when the shell's process now runs another program.
    pub(crate) fn replaced(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            let now = std::fs::read_link(format!("/proc/{}/exe", self.pgid)).ok();
            self.exe.is_some() && now.is_some() && now != self.exe
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// `true` when the shell's process is stopped (`kill -STOP $$`).
    pub(crate) fn stopped(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.local
                && std::fs::read_to_string(format!("/proc/{}/stat", self.pgid)).is_ok_and(|text| {
                    text.rfind(')')
                        .and_then(|i| text[i + 1..].split_ascii_whitespace().next())
                        .is_some_and(|state| state == "T")
                })
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}
