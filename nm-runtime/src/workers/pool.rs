//! A kept pool of threads that each run one closure per call, with the caller taking part,
//! and the waits that make a call cheap: a thread whose run is done watches for the next one
//! for a while before it sleeps, and the caller watches for the end of a run before it sleeps.
//! A sleeping thread took tens of microseconds to wake on a virtual machine, once to start a
//! run and once more to end it, a good part of a short kernel's call (BENCHMARKS.md, "Two
//! threads"); OpenMP runtimes wait the same way.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// What each thread of a run calls.
type Work<'a> = dyn Fn() + Sync + 'a;

/// How long a waiting thread watches before it sleeps: a little more than the gaps between
/// calls of a kernel run in a loop (untimed set-up, a result handed back), and short enough
/// that an idle pool soon gives its cores back.
const WATCH: Duration = Duration::from_micros(200);

/// A pool of threads that run the caller's work alongside it, one call at a time.
pub(super) struct Pool {
    shared: Arc<Shared>,
    threads: usize,
    /// Taken for the length of a call: a second caller, or a call from inside a run, finds it
    /// taken and runs elsewhere.
    busy: AtomicBool,
    /// [`forks`] when the threads started: a child forked since has none of them.
    pub(super) forks: u64,
}

/// What the pool's threads and the caller share.
struct Shared {
    /// Bumped to start a run (and, with `stop` set, to end the threads).
    epoch: AtomicU64,
    /// The current run's work, there from the bump of `epoch` until `running` is zero.
    work: Mutex<Option<&'static Work<'static>>>,
    /// The pool's threads still running the current run.
    running: AtomicUsize,
    /// The first panic of a pool thread's run, resumed on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    stop: AtomicBool,
    /// Held to fall asleep and to wake a sleeper, so that no wake-up is missed.
    sleep: Mutex<()>,
    /// The pool's threads sleep here for the next run,
    started: Condvar,
    /// and the caller for the end of one.
    finished: Condvar,
    /// Pool threads asleep on `started`, or about to be.
    sleepers: AtomicUsize,
    caller_asleep: AtomicBool,
    /// How long a wait watches before it sleeps: nothing when the pool and its caller
    /// outnumber the cores, where watching only takes time from the threads that work.
    watch: Duration,
}

impl Pool {
    /// A pool of `threads` threads named `nmsparse-{threads}-{i}`, or `None` where the system
    /// would not start them all.
    pub(super) fn start(threads: usize) -> Option<Pool> {
        let watch = if threads < super::cores() { WATCH } else { Duration::ZERO };
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            work: Mutex::new(None),
            running: AtomicUsize::new(0),
            panic: Mutex::new(None),
            stop: AtomicBool::new(false),
            sleep: Mutex::new(()),
            started: Condvar::new(),
            finished: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            caller_asleep: AtomicBool::new(false),
            watch,
        });
        let pool = Pool { shared, threads, busy: AtomicBool::new(false), forks: forks() };
        for i in 0..threads {
            let shared = pool.shared.clone();
            let spawned =
                std::thread::Builder::new().name(format!("nmsparse-{threads}-{i}")).spawn(move || shared.serve());
            // Dropping the pool ends the threads started so far.
            spawned.ok()?;
        }
        Some(pool)
    }

    /// Runs `work` once on each of the pool's threads and once here, and returns when all
    /// have; a panic in any of them is resumed here once all are done. `false`, having run
    /// nothing, where the pool is in use.
    pub(super) fn run(&self, work: &Work<'_>) -> bool {
        if self.busy.compare_exchange(false, true, SeqCst, SeqCst).is_err() {
            return false;
        }
        let shared = &*self.shared;
        // SAFETY: the pool's threads call `work` only between the bump of `epoch` below and
        // their decrement of `running`; this function returns or unwinds only after
        // `wait_finished` has seen `running` at zero and cleared `work`, so no thread uses
        // the reference after its borrow ends.
        let unbounded = unsafe { std::mem::transmute::<&Work<'_>, &'static Work<'static>>(work) };
        *lock(&shared.work) = Some(unbounded);
        shared.running.store(self.threads, SeqCst);
        shared.epoch.fetch_add(1, SeqCst);
        if shared.sleepers.load(SeqCst) > 0 {
            let _asleep = lock(&shared.sleep);
            shared.started.notify_all();
        }
        let here = panic::catch_unwind(AssertUnwindSafe(work));
        shared.wait_finished();
        *lock(&shared.work) = None;
        let there = lock(&shared.panic).take();
        self.busy.store(false, SeqCst);
        if let Err(payload) = here {
            panic::resume_unwind(payload);
        }
        if let Some(payload) = there {
            panic::resume_unwind(payload);
        }
        true
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let shared = &*self.shared;
        shared.stop.store(true, SeqCst);
        shared.epoch.fetch_add(1, SeqCst);
        let _asleep = lock(&shared.sleep);
        shared.started.notify_all();
    }
}

impl Shared {
    /// A pool thread: each run's work, until the pool is dropped.
    fn serve(&self) {
        let mut seen = 0;
        loop {
            seen = self.wait_started(seen);
            if self.stop.load(SeqCst) {
                return;
            }
            // Copied out, so that the lock is not held while the work runs.
            let work = *lock(&self.work);
            if let Some(work) = work
                && let Err(payload) = panic::catch_unwind(AssertUnwindSafe(work))
            {
                lock(&self.panic).get_or_insert(payload);
            }
            if self.running.fetch_sub(1, SeqCst) == 1 && self.caller_asleep.load(SeqCst) {
                let _asleep = lock(&self.sleep);
                self.finished.notify_one();
            }
        }
    }

    /// The epoch after `seen`, once it is bumped.
    fn wait_started(&self, seen: u64) -> u64 {
        let bumped = || self.epoch.load(SeqCst) != seen;
        if !watch(self.watch, bumped) {
            let mut asleep = lock(&self.sleep);
            // Counted before `epoch` is read again: a caller that bumps it after that read
            // sees the count and wakes this thread under the lock it waits with.
            self.sleepers.fetch_add(1, SeqCst);
            while !bumped() {
                asleep = self.started.wait(asleep).unwrap_or_else(|e| e.into_inner());
            }
            self.sleepers.fetch_sub(1, SeqCst);
        }
        self.epoch.load(SeqCst)
    }

    /// Returns once every pool thread has finished the current run.
    fn wait_finished(&self) {
        let finished = || self.running.load(SeqCst) == 0;
        if watch(self.watch, finished) {
            return;
        }
        let mut asleep = lock(&self.sleep);
        // As in `wait_started`: set before `running` is read again.
        self.caller_asleep.store(true, SeqCst);
        while !finished() {
            asleep = self.finished.wait(asleep).unwrap_or_else(|e| e.into_inner());
        }
        self.caller_asleep.store(false, SeqCst);
    }
}

/// Forks this process has gone through since the first pool started (counted in the child by
/// a `pthread_atfork` handler): compared on every call, where asking the system for the
/// process id took about 100 ns each time.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_fork() {
    // An atomic add is async-signal-safe, as a handler run in a forked child must be.
    FORKS.fetch_add(1, SeqCst);
}

/// Which process this is, as far as the pools go: the forks counted so far, or, where the
/// handler could not be registered (out of memory), the process id (above any count).
pub(super) fn forks() -> u64 {
    static COUNTED: OnceLock<bool> = OnceLock::new();
    // SAFETY: `count_fork` is an `extern "C" fn()` that only adds to an atomic, which is
    // what a handler run in a forked child may do.
    let counted = *COUNTED.get_or_init(|| unsafe { libc::pthread_atfork(None, None, Some(count_fork)) } == 0);
    if counted { FORKS.load(SeqCst) } else { 1 << 63 | u64::from(std::process::id()) }
}

/// How long a watch spins before it yields the core between its checks.
const SPIN: Duration = Duration::from_micros(5);

/// Whether `done` turned true within `window`: checked in a busy loop at first, then with the
/// core offered between checks to any other thread ready to run on it, so that a watching
/// thread does not hold a core that other threads of the process (another library's, say)
/// want right after a call (BENCHMARKS.md, "Two threads").
fn watch(window: Duration, done: impl Fn() -> bool) -> bool {
    if window.is_zero() {
        return done();
    }
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        let waited = start.elapsed();
        if waited >= window {
            return done();
        }
        if waited >= SPIN {
            std::thread::yield_now();
        }
    }
}

/// A lock whose data stays usable after a panic while it was held (the data here are plain
/// values a panic cannot leave half-written).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// How many runs one call of `pool` makes (the caller's and one per pool thread).
    fn runs_per_call(pool: &Pool) -> usize {
        let runs = AtomicUsize::new(0);
        assert!(pool.run(&|| {
            runs.fetch_add(1, SeqCst);
        }));
        runs.into_inner()
    }

    fn on_pool() -> bool {
        std::thread::current().name().is_some_and(|n| n.starts_with("nmsparse-"))
    }

    #[test]
    fn runs_after_the_threads_fell_asleep_still_run_everywhere() {
        let pool = Pool::start(2).expect("two threads");
        // Past the watch the pool's threads sleep before a run, and the caller, whose own
        // run ends first, sleeps before the end: each run must still wake them.
        for pause in [0, 1, 5] {
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(pause));
                let names = Mutex::new(HashSet::new());
                assert!(pool.run(&|| {
                    if on_pool() {
                        std::thread::sleep(Duration::from_millis(pause));
                    }
                    lock(&names).insert(std::thread::current().id());
                }));
                assert_eq!(names.into_inner().unwrap().len(), 3, "pause {pause} ms");
            }
        }
    }

    #[test]
    fn a_panic_in_any_run_reaches_the_caller_after_every_run_is_done() {
        let pool = Pool::start(2).expect("two threads");
        for panicking_on_pool in [false, true] {
            let finished = AtomicUsize::new(0);
            let caught = panic::catch_unwind(AssertUnwindSafe(|| {
                pool.run(&|| {
                    if on_pool() == panicking_on_pool {
                        panic!("a run failed");
                    }
                    // Longer than the panicking runs: the caller still waits for these.
                    std::thread::sleep(Duration::from_millis(2));
                    finished.fetch_add(1, SeqCst);
                })
            }));
            let payload = caught.expect_err("the panic is resumed on the caller");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"a run failed"));
            assert_eq!(finished.into_inner(), if panicking_on_pool { 1 } else { 2 });
            // And the pool serves the next call.
            assert_eq!(runs_per_call(&pool), 3);
        }
    }

    #[test]
    fn a_pool_in_use_refuses_a_second_run_and_serves_the_next() {
        let pool = Pool::start(1).expect("one thread");
        let (inner, outer) = (AtomicUsize::new(0), AtomicUsize::new(0));
        assert!(pool.run(&|| {
            outer.fetch_add(1, SeqCst);
            if !pool.run(&|| {
                inner.fetch_add(1, SeqCst);
            }) {
                inner.fetch_add(100, SeqCst);
            }
        }));
        assert_eq!((outer.into_inner(), inner.into_inner()), (2, 200));
        assert_eq!(runs_per_call(&pool), 2);
    }

    #[test]
    fn dropping_the_pool_ends_its_threads() {
        let pool = Pool::start(3).expect("three threads");
        let shared = Arc::downgrade(&pool.shared);
        assert!(pool.run(&|| {}));
        drop(pool);
        // Each thread holds the shared state until it returns.
        let start = Instant::now();
        while shared.strong_count() > 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the pool's threads did not end");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
