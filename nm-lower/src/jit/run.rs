//! Running the compiler under a time limit.
//!
//! No threads: the compiler writes its output into anonymous in-memory files, read once it has
//! exited, and the wait for its exit is a `poll` on a process file descriptor with the time
//! left as its timeout (a short sleep loop where the kernel has none).

use std::io::{Read as _, Seek as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished run printed.
pub(super) struct Finished {
    pub(super) status: ExitStatus,
    /// Its standard error and output, in the order written (a compiler's diagnostics).
    pub(super) stderr: Vec<u8>,
}

/// Runs `program args`, in a process group of its own, and returns its status and what it
/// printed; `None` when it ran past `limit`, in which case the whole group (the compiler
/// driver and the passes it started) was killed.
pub(super) fn with_limit(program: &str, args: &[&str], limit: Duration) -> std::io::Result<Option<Finished>> {
    let mut err = capture()?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(err.try_clone()?))
        .stderr(Stdio::from(err.try_clone()?))
        .process_group(0)
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    if !exits_within(pid, limit)? {
        // SAFETY: the group is the child's, which is not reaped yet, so its id is not reused.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        child.wait()?;
        return Ok(None);
    }
    let status = child.wait()?;
    let read = |f: &mut std::fs::File| -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        f.rewind()?;
        f.read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    Ok(Some(Finished { status, stderr: read(&mut err)? }))
}

/// A file the child's output goes to: anonymous and in memory (`memfd_create`), else an
/// unnamed file in the temporary directory (created, then unlinked at once).
fn capture() -> std::io::Result<std::fs::File> {
    // SAFETY: the name is a NUL-terminated string; the call only creates a file descriptor.
    let fd = unsafe { libc::memfd_create(c"nmsparse-cc-output".as_ptr(), libc::MFD_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: `fd` was just created and is owned by nothing else.
        return Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("nmsparse-cc-{}-{n}.out", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// Waits until process `pid` (a child) has exited, without reaping it, for at most `limit`;
/// whether it exited.
fn exits_within(pid: libc::pid_t, limit: Duration) -> std::io::Result<bool> {
    let deadline = Instant::now() + limit;
    // SAFETY: `pidfd_open` takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw >= 0 {
        // SAFETY: a descriptor just returned by the kernel, owned by nothing else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = left.as_millis().min(i32::MAX as u128) as i32 + 1;
            // SAFETY: one valid `pollfd`.
            match unsafe { libc::poll(&mut poll, 1, ms) } {
                n if n > 0 => return Ok(true),
                0 if Instant::now() >= deadline => return Ok(false),
                0 => continue,
                _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => continue,
                _ => return Err(std::io::Error::last_os_error()),
            }
        }
    }
    // No process descriptors: look every few milliseconds.
    let mut nap = Duration::from_millis(1);
    loop {
        // SAFETY: `info` is a valid out parameter; WNOWAIT leaves the child waitable.
        let exited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r =
                libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
            r == 0 && info.si_pid() != 0
        };
        if exited {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}
