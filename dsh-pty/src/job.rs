//! A kill-on-close Job Object holding a console session's process tree
//! (Windows, where there are no sessions or process groups to signal).
//!
//! The program is put in the job right after it starts; everything it starts
//! from then on is in the job too. Terminating the job, or closing its last
//! handle, ends every process in it. A child started in the instant between
//! the program's start and its assignment is not in the job.

use std::io;

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
    SetInformationJobObject, TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{OpenProcess, PROCESS_SET_QUOTA, PROCESS_TERMINATE};

/// A job handle; dropping it ends every process in the job.
#[derive(Debug)]
pub(crate) struct Job(HANDLE);

// SAFETY: a job handle may be used and closed from any thread.
unsafe impl Send for Job {}
// SAFETY: the handle is only passed to thread-safe Win32 calls.
unsafe impl Sync for Job {}

/// The job's limits: its processes die when its last handle closes.
fn limits() -> JOBOBJECT_EXTENDED_LIMIT_INFORMATION {
    // SAFETY: the structure is plain data for which all-zero is valid.
    let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    info
}

impl Job {
    /// A new job holding process `pid`.
    pub(crate) fn holding(pid: u32) -> io::Result<Job> {
        // SAFETY: null attributes and name are allowed; the result is checked.
        let handle = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if handle.is_null() {
            return Err(io::Error::last_os_error());
        }
        let job = Job(handle);
        let info = limits();
        // SAFETY: `info` is a valid structure of the size passed.
        let ok = unsafe {
            SetInformationJobObject(
                job.0,
                JobObjectExtendedLimitInformation,
                (&raw const info).cast(),
                size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: plain call; the handle is checked and closed below.
        let process = unsafe { OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, 0, pid) };
        if process.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both handles are open.
        let ok = unsafe { AssignProcessToJobObject(job.0, process) };
        let err = io::Error::last_os_error();
        // SAFETY: `process` is open and owned here.
        unsafe { CloseHandle(process) };
        if ok == 0 {
            return Err(err);
        }
        Ok(job)
    }

    /// Ends every process in the job with exit code `code`.
    pub(crate) fn terminate(&self, code: u32) -> io::Result<()> {
        // SAFETY: the handle is open for the job's life.
        if unsafe { TerminateJobObject(self.0, code) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: the handle is open and owned; closing the last handle of a
        // kill-on-close job ends its processes.
        unsafe { CloseHandle(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_ends_its_processes_when_closed() {
        let info = limits();
        assert_eq!(
            info.BasicLimitInformation.LimitFlags & JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
            JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        );
    }
}
