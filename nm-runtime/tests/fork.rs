//! A process forked after the kernels' worker pools started (Python's multiprocessing does
//! this) has their records but none of their threads. Its own test binary: a fork while
//! another test's thread held the pools' lock would hang the child for the test's own reasons.

use nm_runtime::workers::run_on;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[test]
fn a_forked_child_starts_pools_of_its_own() {
    run_on(2, || {});
    // SAFETY: the child only calls `run_on` (which starts threads, as a forked Python process
    // might) and exits without returning into the test harness.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let runs = AtomicUsize::new(0);
        run_on(2, || {
            runs.fetch_add(1, Ordering::Relaxed);
        });
        // SAFETY: `_exit` ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(runs.into_inner() as i32) };
    }
    let start = Instant::now();
    let mut status = 0;
    // SAFETY: `waitpid` on the child just forked, with a pointer to a local.
    while unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == 0 {
        if start.elapsed() > Duration::from_secs(20) {
            // SAFETY: the child is ours and has not been reaped.
            unsafe { libc::kill(child, libc::SIGKILL) };
            panic!("the forked child hung in run_on");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 2, "status {status:#x}");
}
