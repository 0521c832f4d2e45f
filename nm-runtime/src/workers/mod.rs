//! Worker threads for the kernels that split their work (row ranges of a compiled kernel, row
//! blocks of an N:M SpMM, the join of a sparse result's parts): one pool per thread count,
//! started on first use and kept, so that a call does not pay for starting its threads
//! (spawned per call, two threads made a short SpMV take twice as long as one).

mod pool;

use pool::Pool;
use std::sync::{Arc, Mutex, OnceLock};

/// The most threads a kernel runs on; asking for more is an error at the command line and in
/// the C library, and [`run_on`] runs on this many. Past the cores, threads only wait for one
/// another, and a few thousand on two cores turned a sub-millisecond SpMV into seconds: the
/// bound keeps a typo from looking like a hang.
pub const MAX_THREADS: usize = 1024;

/// The threads this machine runs at once (1 where it cannot tell), at most [`MAX_THREADS`]: the
/// count a schedule's `parallelize` runs on when no count is given.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS)
}

/// Runs `work` on up to `threads` threads (at most [`MAX_THREADS`]) and returns when every
/// run has: once on the calling thread and once on each thread of a kept pool of one fewer,
/// or, where that pool is in use (a call from inside one of its runs, or from another thread
/// at the same time) or cannot be started, on the calling thread and as many threads as could
/// be spawned for this call. So `work` takes its tasks from shared state (an atomic counter,
/// say) until none are left, and must not count on how many runs there are. One thread or
/// none: `work` runs on the calling thread. A panic in any run is resumed here once every
/// run is done.
///
/// The calling thread works rather than waiting for a pool of `threads`: one thread fewer to
/// wake, and the one that starts at once. The sparsest N:M products on two threads were a few
/// percent faster for it, the others and short SpMVs level.
pub fn run_on(threads: usize, work: impl Fn() + Sync) {
    let threads = threads.min(MAX_THREADS);
    if threads <= 1 {
        work();
        return;
    }
    if !pool(threads - 1).is_some_and(|pool| pool.run(&work)) {
        run_spawned(threads, &work);
    }
}

/// [`run_on`] on threads spawned for this call: `work` here and on up to `threads - 1` more
/// (a thread the system refuses leaves its share to the others); the first panic, here or on
/// one of them, resumed once all are done.
fn run_spawned(threads: usize, work: &(dyn Fn() + Sync)) {
    std::thread::scope(|s| {
        let spawned: Vec<_> =
            (1..threads).map_while(|_| std::thread::Builder::new().spawn_scoped(s, work).ok()).collect();
        let here = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let there: Vec<_> = spawned.into_iter().map(|t| t.join()).collect();
        if let Some(Err(payload)) = std::iter::once(here).chain(there).find(Result::is_err) {
            std::panic::resume_unwind(payload);
        }
    });
}

/// Pools kept at most: asking for many thread counts one after another (2, 3, …, 100) must
/// not leave thousands of idle threads behind. The least recently used pool goes first; its
/// threads end once no call still uses it.
const KEPT_POOLS: usize = 4;

/// The pools started so far with their thread counts, the most recently used last.
type Pools = Vec<(usize, Arc<Pool>)>;

fn pools() -> std::sync::MutexGuard<'static, Pools> {
    static POOLS: OnceLock<Mutex<Pools>> = OnceLock::new();
    pool::lock(POOLS.get_or_init(Default::default))
}

/// The kept pool of `threads` threads (besides the caller, [`run_on`]), started now if there
/// is none; `None` where the threads could not be started.
fn pool(threads: usize) -> Option<Arc<Pool>> {
    let mut pools = pools();
    // A child forked after pools started has their records but none of their threads: it
    // starts its own. The parent's are forgotten, not dropped (a lock of theirs may have
    // been held by one of the parent's threads at the fork).
    let forks = pool::forks();
    if pools.first().is_some_and(|(_, p)| p.forks != forks) {
        pools.drain(..).for_each(std::mem::forget);
    }
    let pool = match pools.iter().position(|(n, _)| *n == threads) {
        Some(at) => pools.remove(at).1,
        None => Arc::new(Pool::start(threads)?),
    };
    pools.push((threads, pool.clone()));
    if pools.len() > KEPT_POOLS {
        pools.remove(0);
    }
    Some(pool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn work_runs_once_on_each_of_the_threads_asked_for() {
        for threads in [0, 1, 2, 3, 5] {
            for _ in 0..3 {
                let runs = AtomicUsize::new(0);
                let names = Mutex::new(HashSet::new());
                run_on(threads, || {
                    runs.fetch_add(1, Ordering::Relaxed);
                    names.lock().unwrap().insert(std::thread::current().id());
                });
                assert_eq!(runs.into_inner(), threads.max(1));
                assert_eq!(names.into_inner().unwrap().len(), threads.max(1));
            }
        }
    }

    #[test]
    fn at_most_max_threads_run() {
        let runs = AtomicUsize::new(0);
        run_on(MAX_THREADS + 7, || {
            runs.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.into_inner(), MAX_THREADS);
        // Its thousand threads end here rather than with the test binary.
        pools().retain(|(n, _)| *n != MAX_THREADS - 1);
    }

    #[test]
    fn only_the_most_recently_used_pools_are_kept() {
        for threads in 2..10 {
            run_on(threads, || {});
        }
        run_on(7, || {});
        // Other tests may start pools of their own in between: only the bound is certain.
        let kept: Vec<usize> = pools().iter().map(|(n, _)| *n).collect();
        assert!(kept.len() <= KEPT_POOLS, "{kept:?}");
    }

    #[test]
    fn the_calling_thread_takes_part_and_calls_nest() {
        let here = std::thread::current().id();
        let names = Mutex::new(HashSet::new());
        let inner = AtomicUsize::new(0);
        run_on(3, || {
            names.lock().unwrap().insert(std::thread::current().id());
            // A kernel's work may itself split (on a pool thread, or on the caller).
            run_on(2, || {
                inner.fetch_add(1, Ordering::Relaxed);
            });
        });
        let names = names.into_inner().unwrap();
        assert!(names.contains(&here) && names.len() == 3, "{names:?}");
        assert_eq!(inner.into_inner(), 3 * 2);
        // The same pool inside itself: its one thread runs the inner work too.
        let inner = AtomicUsize::new(0);
        run_on(2, || {
            run_on(2, || {
                inner.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(inner.into_inner(), 2 * 2);
    }

    #[test]
    fn tasks_shared_through_a_counter_are_each_taken_once() {
        let next = AtomicUsize::new(0);
        let done: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        run_on(4, || {
            loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= done.len() {
                    break;
                }
                done[t].fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(done.iter().all(|d| d.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn spawned_threads_run_everywhere_and_hand_back_a_panic() {
        let names = Mutex::new(HashSet::new());
        run_spawned(3, &|| {
            names.lock().unwrap().insert(std::thread::current().id());
        });
        assert_eq!(names.into_inner().unwrap().len(), 3);
        let here = std::thread::current().id();
        for panicking_here in [false, true] {
            let finished = AtomicUsize::new(0);
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_spawned(3, &|| {
                    if (std::thread::current().id() == here) == panicking_here {
                        panic!("a run failed");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    finished.fetch_add(1, Ordering::SeqCst);
                })
            }));
            let payload = caught.expect_err("the panic is resumed on the caller");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"a run failed"));
            assert_eq!(finished.into_inner(), if panicking_here { 2 } else { 1 });
        }
    }

    #[test]
    fn calls_from_many_threads_at_once_each_run_on_all_their_threads() {
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let names = Mutex::new(HashSet::new());
                        run_on(2, || {
                            names.lock().unwrap().insert(std::thread::current().id());
                        });
                        assert_eq!(names.into_inner().unwrap().len(), 2);
                    }
                });
            }
        });
    }
}
