//! Running a compiled kernel: the arrays handed to C as `nms_array` descriptors, grown through
//! their callback, on one thread, on OpenMP's, or as row ranges on the worker pool.

use super::emit::emit_library;
use crate::args::{ArgumentError, ArrayData, Partition, ReductionKind};
use crate::ir::{ArrayId, ElemType, Function, Role, Stmt};
use crate::jit::{CCompiler, CompileOptions, Compiled, JitError, OptLevel};
use nm_ir::id::Id;
use nm_runtime::memory::Peer;

/// What can go wrong running a compiled kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Compiling or loading failed.
    #[error(transparent)]
    Jit(#[from] JitError),
    /// The arrays do not match the kernel's parameters.
    #[error(transparent)]
    Arguments(#[from] ArgumentError),
    /// The kernel could not grow an output: the message says how much it needed.
    #[error("kernel `{0}` ran out of memory: {1}")]
    OutOfMemory(String, String),
}

/// A compiled kernel.
pub struct CKernel {
    function: Function,
    compiled: Compiled,
    /// Memory of the last [`CKernel::run_rows`]: per-thread workspaces and per-range outputs,
    /// emptied and reused, so that repeated runs do not page-fault fresh allocations.
    pool: std::sync::Mutex<Pool>,
    /// Per parameter, whether the kernel only appends to it ([`crate::ir::appended`]): grown
    /// without zeroing, its length after the call the one its `Written` statement gives.
    appended: Vec<bool>,
    /// The row bounds parameter, where the kernel has one (see [`Partition`]).
    bounds: Option<usize>,
    /// The kernel's `NAME_threads(n)` where it has OpenMP loops (see [`CKernel::run_on`]),
    /// looked up once: valid while `compiled` keeps the library loaded.
    set_threads: Option<unsafe extern "C" fn(libc::c_int)>,
}

/// Arrays [`CKernel::run_rows`] keeps between calls (indexed like the kernel's parameters).
#[derive(Default)]
struct Pool {
    threads: Vec<Vec<ArrayData<'static>>>,
    ranges: Vec<Vec<ArrayData<'static>>>,
}

/// The C side's view of one argument (see the module doc).
#[repr(C)]
struct NmsArray {
    data: *mut libc::c_void,
    len: i64,
    /// The `ArrayData` behind `data`, for `grow` (its lifetime erased: it outlives the call).
    owner: *mut ArrayData<'static>,
    grow: unsafe extern "C" fn(*mut NmsArray, i64) -> libc::c_int,
}

type Entry = unsafe extern "C" fn(*mut NmsArray) -> libc::c_int;

/// `-O3` only where a loop of some kernel sweeps a row (see [`OptLevel`]).
fn opt_level(functions: &[&Function]) -> OptLevel {
    let sweeps = functions.iter().any(|f| crate::ir::sweeps_row(&f.body, |_| true));
    if sweeps { OptLevel::O3 } else { OptLevel::O2 }
}

impl CKernel {
    /// Emits, compiles (or finds in the cache) and loads `f`.
    pub fn compile(f: &Function, cc: &CCompiler) -> Result<CKernel, JitError> {
        let mut kernels = CKernel::compile_library(&[f], cc)?;
        Ok(kernels.pop().expect("one kernel per function"))
    }

    /// Emits `functions` (their names differ) as one library, compiles it in one run of the
    /// compiler (or finds it in the cache) and loads it once: a kernel per function, in order.
    /// An assembly and a compute kernel compiled together cost one compiler start and one
    /// load (BENCHMARKS.md, "Compile latency").
    pub fn compile_library(functions: &[&Function], cc: &CCompiler) -> Result<Vec<CKernel>, JitError> {
        let parallel = |f: &Function| crate::ir::has_parallel_loops(f);
        let openmp = functions.iter().any(|f| parallel(f) || f.atomic.is_some());
        let options = CompileOptions { openmp, sanitize: false, level: opt_level(functions) };
        let compiled = cc.compile(&emit_library(functions), options)?;
        functions
            .iter()
            .map(|f| {
                let set_threads = if parallel(f) {
                    // SAFETY: `emit_library` defines `void NAME_threads(int)` for every kernel
                    // with a parallel loop.
                    Some(*unsafe {
                        compiled.function::<unsafe extern "C" fn(libc::c_int)>(&format!("{}_threads", f.name))
                    }?)
                } else {
                    None
                };
                Ok(CKernel::new(f, compiled.clone(), set_threads))
            })
            .collect()
    }

    fn new(f: &Function, compiled: Compiled, set_threads: Option<unsafe extern "C" fn(libc::c_int)>) -> CKernel {
        CKernel {
            function: f.clone(),
            compiled,
            pool: Default::default(),
            appended: crate::ir::appended(f),
            bounds: f.arrays.iter().find(|(_, d)| d.role == Role::Bounds).map(|(b, _)| b.index()),
            set_threads,
        }
    }

    /// Compiles C written or edited by a user in place of the generated code (taco's
    /// `-read-source`): `source` must define `int NAME(nms_array *args)` for `f`'s name, taking
    /// `f`'s arguments as `emit(f)` does (and may define `void NAME_threads(int)`). The
    /// arrays it is run on are checked as for generated code; what the function does with
    /// them is the source's.
    pub fn compile_source(f: &Function, source: &str, cc: &CCompiler) -> Result<CKernel, JitError> {
        let openmp = source.contains("#pragma omp");
        let compiled = cc.compile(source, CompileOptions { openmp, ..CompileOptions::default() })?;
        // SAFETY: only looked up, to fail early when the source does not define it; the
        // signature is the source's contract stated above.
        unsafe { compiled.function::<Entry>(&f.name) }?;
        // SAFETY: as above: `void NAME_threads(int)` where the source defines it.
        let set_threads =
            unsafe { compiled.function::<unsafe extern "C" fn(libc::c_int)>(&format!("{}_threads", f.name)) }
                .ok()
                .map(|s| *s);
        // Grown as `f`'s own code grows them: the source says how much it wrote, as
        // `-write-source`'s does.
        Ok(CKernel::new(f, compiled, set_threads))
    }

    /// Whether the object came from the cache.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// Runs the kernel on `arrays` (checked like the interpreter's arguments); outputs are
    /// updated in place, grown if the kernel grew them.
    pub fn run(&self, arrays: &mut [ArrayData]) -> Result<(), RunError> {
        let f = &self.function;
        crate::args::check_arguments(f, arrays)?;
        let mut first = 0;
        if let Some(b) = self.bounds {
            match &arrays[b] {
                ArrayData::I64(v) if v.len() >= 4 => first = v[3],
                bounds => {
                    let array = f.arrays[ArrayId::new(b)].name.clone();
                    return Err(ArgumentError::Bounds { array, len: bounds.len() }.into());
                }
            }
        }
        self.check_first_entry(arrays.iter().enumerate(), first)?;
        let mut descriptors: Vec<NmsArray> = arrays
            .iter_mut()
            .enumerate()
            .map(|(k, data)| {
                let owner: *mut ArrayData<'static> = (data as *mut ArrayData).cast();
                // SAFETY: `owner` comes from a live `&mut ArrayData`.
                let (ptr, len) = raw_parts(unsafe { &mut *owner });
                NmsArray { data: ptr, len: len as i64, owner, grow: self.grow_of(k) }
            })
            .collect();
        // Workspaces: `finish` compresses into the result's arrays, reached through `host`.
        let mut hosts: Vec<Box<FinishHost>> = Vec::new();
        for (id, _) in f.arrays.iter().filter(|(_, a)| matches!(a.role, Role::Workspace { .. })) {
            let k = nm_ir::id::Id::index(id);
            let ArrayData::Workspace(w) = &mut arrays[k] else { continue };
            let targets = crate::args::Targets::of(f, id)
                .ok_or_else(|| RunError::OutOfMemory(f.name.clone(), "a workspace without result arrays".into()))?;
            let mut host = Box::new(FinishHost { targets, workspace: w });
            let slot = host.workspace_slot();
            // SAFETY: `slot` is the live workspace's slot (boxed, not moved during the call).
            unsafe {
                (*slot).finish = Some(finish_workspace);
                (*slot).host = (&mut *host as *mut FinishHost).cast();
            }
            hosts.push(host);
        }
        // SAFETY: the generated function has exactly this signature (see `emit`).
        let entry = unsafe { self.compiled.function::<Entry>(&f.name) }?;
        GROW_FAILURE.with(|g| g.take());
        // SAFETY: one descriptor per parameter, each pointing at `len` elements of the declared
        // type in a vector borrowed mutably for the whole call (nothing else touches it); inputs
        // are only read; outputs are written within their length, which only `grow` extends
        // (positions come from the shapes the arrays were sized by, checked above).
        let status = unsafe { self.call(*entry, &mut descriptors) };
        drop(hosts);
        if status != 0 {
            let flushed = arrays.iter_mut().find_map(|a| match a {
                ArrayData::Workspace(w) => w.take_error().map(|e| e.to_string()),
                _ => None,
            });
            let why =
                flushed.or_else(|| GROW_FAILURE.with(|g| g.take())).unwrap_or_else(|| "an allocation failed".into());
            return Err(RunError::OutOfMemory(f.name.clone(), why));
        }
        for k in self.written() {
            self.take_written(k, &mut arrays[k], descriptors[k].len)
                .map_err(|e| RunError::OutOfMemory(f.name.clone(), e))?;
        }
        Ok(())
    }

    /// [`CKernel::run`] with the kernel's OpenMP loops (if any: `parallelize(v, cpu_thread,
    /// no_races)` on a loop that is not a row range) on `threads` threads, as taco's
    /// `-nthreads` sets them: OpenMP's count for the calling thread, kept for its later runs.
    pub fn run_on(&self, arrays: &mut [ArrayData], threads: usize) -> Result<(), RunError> {
        if let Some(set) = self.set_threads {
            let n = libc::c_int::try_from(threads.max(1)).unwrap_or(libc::c_int::MAX);
            // SAFETY: the library `set` lives in is loaded while `self.compiled` is; it only
            // calls `omp_set_num_threads(n)`, with `n >= 1`.
            unsafe { set(n) };
        }
        self.run(arrays)
    }

    /// The parameters a top-level `Written` statement names.
    fn written(&self) -> impl Iterator<Item = usize> + '_ {
        self.function.body.iter().filter_map(|s| match s {
            Stmt::Written { array, .. } => Some(nm_ir::id::Id::index(*array)),
            _ => None,
        })
    }

    /// Whether a row range can start appending at entry `first` (`bounds[3]`, see
    /// [`Partition`]) to `arrays` (each with its parameter's index): never before the first
    /// element, and since the kernel counts the elements before it of an array it only appends
    /// to as written, each such array must hold at least that many.
    fn check_first_entry<'d>(
        &self,
        arrays: impl IntoIterator<Item = (usize, &'d ArrayData<'d>)>,
        first: i64,
    ) -> Result<(), ArgumentError> {
        let past = |k: usize, data: &ArrayData| match usize::try_from(first) {
            Ok(first) => self.appended[k] && data.len() < first,
            Err(_) => self.bounds == Some(k),
        };
        match arrays.into_iter().find(|&(k, data)| past(k, data)) {
            Some((k, data)) => Err(ArgumentError::FirstEntry {
                array: self.function.arrays[ArrayId::new(k)].name.clone(),
                first,
                len: data.len(),
            }),
            None => Ok(()),
        }
    }

    /// The `grow` of parameter `k`: without zeroing for an array the kernel only appends to.
    fn grow_of(&self, k: usize) -> unsafe extern "C" fn(*mut NmsArray, i64) -> libc::c_int {
        if self.appended[k] { grow_unwritten } else { grow_array }
    }

    /// After a successful call: parameter `k`, which a top-level `Written` statement names,
    /// takes the length `len` the kernel left in its descriptor.
    fn take_written(&self, k: usize, data: &mut ArrayData, len: i64) -> Result<(), String> {
        let taken = if self.appended[k] {
            // SAFETY: the kernel only appends to this array (see `crate::ir::appended`): it
            // wrote each of its first `len` elements, which its `Written` statement counts.
            usize::try_from(len).is_ok_and(|n| unsafe { data.claim_written(n) })
        } else {
            usize::try_from(len).is_ok_and(|n| n <= data.len() && data.truncate(n))
        };
        if taken {
            Ok(())
        } else {
            Err(format!(
                "`{}`: {len} elements said written, beyond its memory",
                self.function.arrays[ArrayId::new(k)].name
            ))
        }
    }
}

/// How many of `threads` threads a reduction into per-thread copies of a `len`-element result
/// should use, given the operands' `stored` values: `t` threads save `stored·(1 − 1/t)`
/// multiply-adds and cost `2·len·t` operations (each copy zeroed, then summed), so they pay
/// where `stored > 2·len·t²/(t − 1)` — more than 8 values per result element on two threads.
/// Measured on CSC SpMV: two threads paid at tens of nonzeros per column and lost at a few
/// (BENCHMARKS.md's history, "CSC SpMV against scipy in the same format").
pub fn threads_worth_copies(stored: usize, len: usize, threads: usize) -> usize {
    let mut t = threads;
    while t > 1 && (stored as f64) <= 2.0 * len as f64 * (t * t) as f64 / (t - 1) as f64 {
        t -= 1;
    }
    t.max(1)
}

thread_local! {
    /// Why the last `grow` on this thread failed, for the error `run` returns.
    static GROW_FAILURE: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
    /// The descriptors of the arrays the kernel running on this thread appends to, written in
    /// step, with their element sizes: `grow` places a grown one apart from the others.
    static IN_STEP: std::cell::RefCell<Vec<(*const NmsArray, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How [`CKernel::run_rows`] gives an argument to each range.
#[derive(Clone, Copy, PartialEq)]
enum Sharing {
    /// One array for every thread: inputs, and outputs ranges write disjoint parts of.
    Shared,
    /// One per thread, reused across its ranges: workspaces.
    PerThread,
    /// One per range: the range itself, a sparse result's `crd` and values.
    PerRange,
}

/// A pointer and length of a shared argument, handed to the worker threads.
#[derive(Clone, Copy)]
struct SharedArray(*mut libc::c_void, i64);

// SAFETY: a shared array is read by every range, or written at disjoint elements (rows) by
// each — never grown (`refuse_grow`) — while `run_rows` holds the `&mut` it came from.
unsafe impl Send for SharedArray {}
// SAFETY: as above.
unsafe impl Sync for SharedArray {}

/// Per range: its own arrays (indexed like the kernel's, empty where shared), or why it failed.
type RangeResult = Result<Vec<ArrayData<'static>>, String>;

/// Every range's own arrays, in range order, or the first range's failure.
fn ranges_arrays(
    kernel: &str,
    outcomes: Vec<std::sync::Mutex<Option<RangeResult>>>,
) -> Result<Vec<Vec<ArrayData<'static>>>, RunError> {
    let mut own = Vec::with_capacity(outcomes.len());
    for o in outcomes {
        match o.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(arrays)) => own.push(arrays),
            Some(Err(why)) => return Err(RunError::OutOfMemory(kernel.to_string(), why)),
            None => return Err(RunError::OutOfMemory(kernel.to_string(), "a worker thread stopped".into())),
        }
    }
    Ok(own)
}

impl CKernel {
    /// Runs the kernel with its outermost loop split into row ranges over `threads` threads
    /// (see [`Partition`]): ranges are taken dynamically (16 per thread), each thread keeps its
    /// own workspaces. A sparse result's ranges taken from the first on by one thread are
    /// appended to the caller's arrays in place (each starts where the one before ended); the
    /// other threads take ranges from the last down into arrays of their own, appended after
    /// (a copy of about half the result on two threads, not all of it: BENCHMARKS.md, "Two
    /// threads").
    /// The result equals [`CKernel::run`]'s, bit for bit: each row is computed by one thread in
    /// the same order. Ranges that add into the same elements (a
    /// [`Reduction`](crate::args::Reduction)) sum into a copy of the result per thread (no
    /// more threads than [`threads_worth_copies`] allows where the schedule did not ask for
    /// them), each taking every `threads`-th range, the copies then
    /// added in thread order (the same sums for the same thread count), or add atomically.
    pub fn run_rows(&self, arrays: &mut [ArrayData], partition: &Partition, threads: usize) -> Result<(), RunError> {
        use std::sync::Mutex;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let f = &self.function;
        let extent = partition.extent;
        let reduction = partition.reduction;
        let per_thread = reduction.filter(|r| r.kind == ReductionKind::PerThread).map(|r| r.values.index());
        let threads = self.threads_for(arrays, partition, per_thread, threads);
        if threads <= 1 || extent < 2 {
            return self.run(arrays);
        }
        crate::args::check_arguments(f, arrays)?;
        let rows = partition.rows.map(|(pos, crd, vals)| (pos.index(), crd.index(), vals.index()));
        let sharing = self.sharing(rows, per_thread);
        if let Some((pos, ..)) = rows {
            arrays[pos].resize(extent + 1);
        }
        // Atomic adds go into the caller's result, zeroed first (the kernel is told not to).
        if let Some(r) = reduction.filter(|r| r.kind == ReductionKind::Atomic) {
            arrays[r.values.index()].fill_zero();
        }
        let result_len = per_thread.map_or(0, |k| arrays[k].len());
        // The caller's `crd` and values, which the front thread appends to in place.
        let appended: Vec<usize> = rows
            .map(|(_, crd, vals)| [crd, vals].into_iter().filter(|&k| sharing[k] == Sharing::PerRange).collect())
            .unwrap_or_default();
        let elems: Vec<ElemType> = arrays.iter().map(ArrayData::elem).collect();
        let fresh = || elems.iter().map(|&e| ArrayData::empty(e)).collect::<Vec<ArrayData<'static>>>();
        let mut front = fresh();
        for &k in &appended {
            front[k] = std::mem::replace(&mut arrays[k], ArrayData::empty(elems[k])).into_owned();
            front[k].clear();
        }
        let cuts = row_cuts(extent, (threads * 16).min(extent), partition.weights.map(|w| &arrays[w.index()]));
        let ranges = cuts.len() - 1;
        let run = RangeRun {
            kernel: self,
            // SAFETY: the generated function has exactly this signature (see `emit`).
            entry: *unsafe { self.compiled.function::<Entry>(&f.name) }?,
            shared: arrays
                .iter_mut()
                .map(|a| {
                    let (ptr, len) = raw_parts(a);
                    SharedArray(ptr, len as i64)
                })
                .collect(),
            sharing: &sharing,
            cuts: &cuts,
        };
        // Memory from the last call when another thread is not using it (else fresh), emptied.
        let mut pool = self.pool.try_lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default();
        let reuse = |pooled: &mut Vec<Vec<ArrayData<'static>>>, n: usize| -> Vec<Mutex<Vec<ArrayData<'static>>>> {
            (0..n)
                .map(|_| {
                    let mut a = pooled.pop().filter(|a| a.len() == elems.len()).unwrap_or_else(fresh);
                    a.iter_mut().for_each(ArrayData::clear);
                    Mutex::new(a)
                })
                .collect()
        };
        let thread_arrays = reuse(&mut pool.threads, threads);
        let range_arrays = reuse(&mut pool.ranges, ranges);
        let outcomes: Vec<Mutex<Option<RangeResult>>> = (0..ranges).map(|_| Mutex::new(None)).collect();
        let take =
            |m: &Mutex<Vec<ArrayData<'static>>>| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()));
        let front = Mutex::new(front);
        let claims = Mutex::new(Claims { next: 0, end: ranges });
        let workers = AtomicUsize::new(0);
        nm_runtime::workers::run_on(threads, || match per_thread {
            // Each copy of the result takes every `threads`-th range, in order, whichever worker
            // claims it (fewer workers than asked claim several).
            Some(k) => loop {
                let t = workers.fetch_add(1, Ordering::Relaxed);
                let Some(scratch) = thread_arrays.get(t) else { return };
                let mut scratch = scratch.lock().unwrap_or_else(|e| e.into_inner());
                scratch[k].resize(result_len);
                let mut descriptors = Vec::new();
                for r in (t..ranges).step_by(threads) {
                    let mut own = take(&range_arrays[r]);
                    let ran = run.range(r, &mut scratch, &mut own, 0, &mut descriptors).map(|()| own);
                    *outcomes[r].lock().unwrap_or_else(|e| e.into_inner()) = Some(ran);
                }
            },
            None => {
                // Each worker its own scratch arrays (one set per thread); the first takes the
                // ranges from the first on and appends them in place.
                let t = workers.fetch_add(1, Ordering::Relaxed);
                let Some(scratch) = thread_arrays.get(t) else { return };
                let mut scratch = scratch.lock().unwrap_or_else(|e| e.into_inner());
                let mut front = (t == 0).then(|| front.lock().unwrap_or_else(|e| e.into_inner()));
                let mut descriptors = Vec::new();
                loop {
                    // Claimed, and the lock let go before the range runs.
                    let claimed = claims.lock().unwrap_or_else(|e| e.into_inner()).take(front.is_some());
                    let Some(r) = claimed else { break };
                    let mut own = take(&range_arrays[r]);
                    let ran = match front.as_deref_mut() {
                        Some(front) => {
                            let first = appended.first().map_or(0, |&k| front[k].len());
                            run.range(r, &mut scratch, front, first, &mut descriptors)
                        }
                        None => run.range(r, &mut scratch, &mut own, 0, &mut descriptors),
                    };
                    *outcomes[r].lock().unwrap_or_else(|e| e.into_inner()) = Some(ran.map(|()| own));
                }
            }
        });
        // Back in the caller's arrays, whether or not every range ran.
        let mut front = front.into_inner().unwrap_or_else(|e| e.into_inner());
        for &k in &appended {
            arrays[k] = std::mem::replace(&mut front[k], ArrayData::empty(elems[k]));
        }
        let own = ranges_arrays(&f.name, outcomes)?;
        if let Some(k) = per_thread {
            let copies: Vec<std::sync::MutexGuard<Vec<ArrayData>>> =
                thread_arrays.iter().map(|m| m.lock().unwrap_or_else(|e| e.into_inner())).collect();
            let parts: Vec<&ArrayData> = copies.iter().map(|c| &c[k]).collect();
            arrays[k].set_sum(&parts, threads);
        }
        if let Some(rows) = rows {
            let in_place = claims.into_inner().unwrap_or_else(|e| e.into_inner()).next;
            self.join_ranges(arrays, rows.0, &appended, &own[in_place..], &cuts[in_place..], threads)?;
        }
        if let Ok(mut kept) = self.pool.try_lock() {
            kept.threads =
                thread_arrays.into_iter().map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner())).collect();
            kept.ranges = own;
        }
        Ok(())
    }
}

/// Which ranges the workers take next: the front worker from the first on, the others from
/// the last down, until they meet. `next` ends as the count of ranges the front took.
struct Claims {
    next: usize,
    end: usize,
}

impl Claims {
    fn take(&mut self, front: bool) -> Option<usize> {
        if self.next >= self.end {
            None
        } else if front {
            self.next += 1;
            Some(self.next - 1)
        } else {
            self.end -= 1;
            Some(self.end)
        }
    }
}

/// What every range of one [`CKernel::run_rows`] call shares.
struct RangeRun<'a> {
    kernel: &'a CKernel,
    entry: Entry,
    /// Each argument's pointer and length, for those given to every range.
    shared: Vec<SharedArray>,
    sharing: &'a [Sharing],
    /// Range `r` is rows `cuts[r]..cuts[r + 1]`.
    cuts: &'a [usize],
}

impl RangeRun<'_> {
    /// Runs range `r` on the thread's `scratch` arrays and the range's `own` (its bounds, and
    /// a sparse result's `crd` and values, appended to from position `first`); each array the
    /// kernel wrote takes the length it says. `descriptors` is the thread's memory for the
    /// kernel's arguments, and its bounds are written into the range's own array in place:
    /// a short kernel's ranges are a few microseconds each.
    fn range(
        &self,
        r: usize,
        scratch: &mut [ArrayData<'static>],
        own: &mut [ArrayData<'static>],
        first: usize,
        descriptors: &mut Vec<NmsArray>,
    ) -> Result<(), String> {
        let (lo, hi) = (self.cuts[r], self.cuts[r + 1]);
        let per_range = self.sharing.iter().zip(own.iter()).enumerate().filter(|(_, (s, _))| **s == Sharing::PerRange);
        self.kernel
            .check_first_entry(per_range.map(|(k, (_, data))| (k, data)), first as i64)
            .map_err(|e| e.to_string())?;
        descriptors.clear();
        for (k, sharing) in self.sharing.iter().enumerate() {
            let owner: *mut ArrayData<'static> = match sharing {
                Sharing::Shared => {
                    let SharedArray(data, len) = self.shared[k];
                    descriptors.push(NmsArray { data, len, owner: std::ptr::null_mut(), grow: refuse_grow });
                    continue;
                }
                Sharing::PerThread => &mut scratch[k],
                // Not a whole run: the caller prepared a reduction's result.
                Sharing::PerRange if self.kernel.bounds == Some(k) => {
                    let bounds = [lo as i64, hi as i64, 0, first as i64];
                    match &mut own[k] {
                        ArrayData::I64(kept) => {
                            kept.clear();
                            kept.extend_from_slice(&bounds);
                        }
                        other => *other = ArrayData::I64(bounds.to_vec()),
                    }
                    &mut own[k]
                }
                Sharing::PerRange => &mut own[k],
            };
            // SAFETY: `owner` comes from a live `&mut ArrayData` of this thread.
            let (data, mut len) = raw_parts(unsafe { &mut *owner });
            if self.kernel.appended[k] {
                // The kernel only writes past the length, which it may do up to the capacity
                // (as after `grow_unwritten`): a range in place starts with the room the ranges
                // before it left, not with a `grow` call.
                // SAFETY: as above.
                len = unsafe { &*owner }.capacity();
            }
            descriptors.push(NmsArray { data, len: len as i64, owner, grow: self.kernel.grow_of(k) });
        }
        GROW_FAILURE.with(|g| g.take());
        // SAFETY: as in `run`: one descriptor per parameter; shared inputs are only read, shared
        // outputs written at the rows of `lo..hi` only (the outer loop's range names disjoint
        // result elements), everything else is this thread's own.
        let status = unsafe { self.kernel.call(self.entry, descriptors) };
        if status != 0 {
            return Err(GROW_FAILURE.with(|g| g.take()).unwrap_or_else(|| "an allocation failed".into()));
        }
        for k in self.kernel.written() {
            let data = match self.sharing[k] {
                Sharing::Shared => continue,
                Sharing::PerThread => &mut scratch[k],
                Sharing::PerRange => &mut own[k],
            };
            self.kernel.take_written(k, data, descriptors[k].len)?;
        }
        Ok(())
    }
}

impl CKernel {
    /// Calls `entry` on `descriptors`, telling `grow` which of them the kernel appends to.
    ///
    /// # Safety
    /// `entry` is this kernel's function and `descriptors` are its arguments, as [`CKernel::run`]
    /// and [`RangeRun::range`] make them.
    unsafe fn call(&self, entry: Entry, descriptors: &mut [NmsArray]) -> libc::c_int {
        let base = descriptors.as_mut_ptr();
        IN_STEP.with(|s| {
            let mut s = s.borrow_mut();
            s.clear();
            for (k, decl) in self.function.arrays.iter().map(|(_, d)| d).enumerate() {
                if self.appended[k] && k < descriptors.len() {
                    // SAFETY: `k` is within `descriptors`.
                    s.push((unsafe { base.add(k) }.cast_const(), decl.elem.size()));
                }
            }
        });
        // SAFETY: the caller's contract.
        let status = unsafe { entry(base) };
        IN_STEP.with(|s| s.borrow_mut().clear());
        status
    }

    /// The threads [`CKernel::run_rows`] runs `partition`'s ranges on, at most `threads`: no
    /// more than there are ranges to take, nor than the workers run; copies of a reduction's
    /// result (`per_thread`, its parameter) only as many as pay for themselves where the
    /// schedule did not ask for them, and never more than half the free memory holds.
    fn threads_for(
        &self,
        arrays: &[ArrayData],
        partition: &Partition,
        per_thread: Option<usize>,
        threads: usize,
    ) -> usize {
        let f = &self.function;
        let extent = partition.extent;
        // No more threads (and sets of scratch arrays) than there are ranges to take, nor than
        // the workers run; no more copies of a reduction's result than half the free memory.
        let mut threads = threads.min(extent).min(nm_runtime::workers::MAX_THREADS);
        if let Some(k) = per_thread.filter(|_| !partition.scheduled) {
            // Copies nobody asked for (`-nthreads` alone): only as many as pay for themselves.
            let stored = f
                .arrays
                .iter()
                .filter(|(_, d)| !d.output && matches!(d.role, Role::Values { .. }))
                .map(|(id, _)| arrays[id.index()].len())
                .sum();
            threads = threads_worth_copies(stored, arrays[k].len(), threads);
        }
        if let Some(k) = per_thread.filter(|_| threads > 1) {
            // At most half the free memory, where the copies are large enough to check.
            let bytes = (arrays[k].len() as u128 * arrays[k].elem().size() as u128).max(1);
            if let Some(free) = nm_runtime::memory::available_for(bytes * threads as u128) {
                threads = threads.min((free / 2 / bytes).min(usize::MAX as u128) as usize);
            }
        }
        threads
    }

    /// How each parameter is shared among the ranges: read-only inputs and outputs at the
    /// ranges' own rows are shared, scratch (and a reduction's copies of the result) per
    /// thread, the bounds and a sparse result's `crd` and values per range. An assembly or
    /// compute half (see `crate::assemble`) writes only some of the result's arrays; the ones
    /// it does not write are shared like inputs.
    fn sharing(&self, rows: Option<(usize, usize, usize)>, per_thread: Option<usize>) -> Vec<Sharing> {
        let f = &self.function;
        let written = |k: usize| crate::assemble::writes(&f.body, ArrayId::new(k));
        f.arrays
            .iter()
            .map(|(id, decl)| match decl.role {
                Role::Bounds => Sharing::PerRange,
                Role::Scratch | Role::Local { .. } => Sharing::PerThread,
                // A reduction's copies of the result, one per thread.
                _ if per_thread == Some(id.index()) => Sharing::PerThread,
                _ if rows.is_some_and(|(_, crd, vals)| id.index() == crd || id.index() == vals)
                    && written(id.index()) =>
                {
                    Sharing::PerRange
                }
                _ => Sharing::Shared,
            })
            .collect()
    }

    /// A sparse result's ranges that ran in arrays of their own (`own`, rows `cuts[r]..cuts[r +
    /// 1]`, the last ones) appended to the caller's `appended` arrays (its `crd` and values, as
    /// the ranges write them), which hold the entries of the ranges before them: each counted
    /// its entries from zero, so its rows' `pos` are shifted by what came before (a compute
    /// half finds `pos` complete, from assembly), and its `crd` and values appended.
    fn join_ranges(
        &self,
        arrays: &mut [ArrayData],
        pos: usize,
        appended: &[usize],
        own: &[Vec<ArrayData>],
        cuts: &[usize],
        threads: usize,
    ) -> Result<(), RunError> {
        let f = &self.function;
        let writes_pos = crate::assemble::writes(&f.body, ArrayId::new(pos));
        let mut offset = appended.first().map_or(0, |&k| arrays[k].len()) as i64;
        let ArrayData::I64(pos_data) = &mut arrays[pos] else { unreachable!("positions are I64") };
        let mut counts = Vec::with_capacity(own.len());
        for r in 0..own.len() {
            let (lo, hi) = (cuts[r], cuts[r + 1]);
            let count = if writes_pos { pos_data[hi] } else { pos_data[hi] - pos_data[lo] };
            if writes_pos {
                for p in &mut pos_data[lo + 1..=hi] {
                    *p += offset;
                }
            }
            counts.push(count.max(0) as usize);
            offset += count;
        }
        pos_data[0] = 0;
        for &k in appended {
            let peers: Vec<Peer> = appended.iter().filter(|&&j| j != k).map(|&j| arrays[j].peer()).collect();
            let parts: Vec<(&ArrayData, usize)> = own.iter().zip(&counts).map(|(a, &n)| (&a[k], n)).collect();
            arrays[k]
                .append(&parts, threads, &peers)
                .map_err(|_| RunError::OutOfMemory(f.name.clone(), format!("joining {offset} result entries")))?;
        }
        Ok(())
    }
}

/// Where at most `ranges` ranges of `extent` rows begin and end: range `r` is rows
/// `cuts[r]..cuts[r + 1]`, never empty (a range's rows are where it writes a sparse result's
/// `pos`, which the join reads). Equal rows each, or, given `weights` (a `pos` array with an
/// entry per row and one more, see [`Partition::weights`]), about equal entries plus rows each
/// (a row costs its entries and its own work), fewer ranges where one row outweighs several
/// ranges' share; weights too short for the rows count for nothing.
fn row_cuts(extent: usize, ranges: usize, weights: Option<&ArrayData>) -> Vec<usize> {
    let position = |i: usize| -> Option<u64> {
        use crate::args::Borrowed;
        match weights? {
            ArrayData::Borrowed(Borrowed::U32(v)) => v.get(i).map(|&x| x as u64),
            ArrayData::Borrowed(Borrowed::U64(v)) => v.get(i).copied(),
            ArrayData::U64(v) => v.get(i).copied(),
            ArrayData::I32(v) => v.get(i).map(|&x| x.max(0) as u64),
            ArrayData::I64(v) => v.get(i).map(|&x| x.max(0) as u64),
            _ => None,
        }
    };
    let equal = || (0..=ranges).map(|r| extent * r / ranges).collect();
    let (Some(first), Some(last)) = (position(0), position(extent)) else { return equal() };
    // The work before row `i`: its entries (from `pos`) and its rows.
    let before = |i: usize| position(i).unwrap_or(first).saturating_sub(first) as u128 + i as u128;
    let total = last.saturating_sub(first) as u128 + extent as u128;
    let mut cuts = vec![0usize; ranges + 1];
    for r in 1..ranges {
        let target = total * r as u128 / ranges as u128;
        // The first row with at least `target` work before it (`before` grows with `i`).
        let (mut lo, mut hi) = (cuts[r - 1], extent);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(mid) < target { lo = mid + 1 } else { hi = mid }
        }
        cuts[r] = lo;
    }
    cuts[ranges] = extent;
    cuts.dedup();
    cuts
}

/// What a workspace's `finish` needs: where the result goes, and the workspace.
struct FinishHost {
    targets: crate::args::Targets,
    workspace: *mut crate::args::WorkspaceData,
}

impl FinishHost {
    fn workspace_slot(&mut self) -> *mut nm_ism::Slot {
        // SAFETY: `workspace` points into an argument `run` borrows mutably for the whole call.
        unsafe { (*self.workspace).slot() }
    }
}

/// `finish` of a workspace slot: compresses the workspace into the kernel's result arrays,
/// replacing the vectors behind their descriptors; 1 (with the reason kept) on failure.
unsafe extern "C" fn finish_workspace(slot: *mut nm_ism::Slot, args: *mut libc::c_void) -> libc::c_int {
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `run` set `host` to a `FinishHost` that outlives the call, and `args` is the
        // descriptor array it passed to the kernel; the result arrays it names are distinct
        // from the workspace's own argument and the kernel no longer reads them.
        let (host, args) = unsafe { (&*((*slot).host as *const FinishHost), args.cast::<NmsArray>()) };
        // SAFETY: as above.
        let ws = unsafe { &mut *host.workspace };
        ws.finish(&host.targets, |a, data| {
            // SAFETY: `a` is one of the kernel's parameters, so `args` has its descriptor, whose
            // owner is the argument's live `ArrayData`.
            unsafe {
                let d = &mut *args.add(nm_ir::id::Id::index(a));
                let old = std::mem::replace(&mut *d.owner, data);
                let (ptr, len) = raw_parts(&mut *d.owner);
                d.data = ptr;
                d.len = len as i64;
                old
            }
        })
    }));
    match done {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            GROW_FAILURE.with(|g| g.set(Some(e.to_string())));
            1
        }
        Err(_) => {
            GROW_FAILURE.with(|g| g.set(Some("a workspace's finish panicked".into())));
            1
        }
    }
}

/// `grow` of an array every range shares: never needed (shared outputs are sized first), so
/// refused rather than racing.
unsafe extern "C" fn refuse_grow(_: *mut NmsArray, _: i64) -> libc::c_int {
    GROW_FAILURE.with(|g| g.set(Some("a shared output cannot grow in a row range".into())));
    1
}

/// `grow` of the kernel ABI: resizes the vector behind `a` to `n` elements (new ones zero) and
/// updates the descriptor; 1 when memory runs out (reported, never an abort).
unsafe extern "C" fn grow_array(a: *mut NmsArray, n: i64) -> libc::c_int {
    // SAFETY: the caller's contract (a descriptor `run` made).
    unsafe { grow(a, n, true) }
}

/// `grow` of an array the kernel only appends to ([`crate::ir::appended`]): room for `n`
/// elements, the ones the kernel wrote kept, the new ones not zeroed (the kernel writes each
/// before reading it; the runner claims only those its `Written` statement counts).
unsafe extern "C" fn grow_unwritten(a: *mut NmsArray, n: i64) -> libc::c_int {
    // SAFETY: the caller's contract (a descriptor `run` made).
    unsafe { grow(a, n, false) }
}

/// [`grow_array`] (`zero`) or [`grow_unwritten`].
///
/// # Safety
/// `a` is a descriptor `run` or `run_rows` made for a writable argument.
unsafe fn grow(a: *mut NmsArray, n: i64, zero: bool) -> libc::c_int {
    let grown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the kernel passes back a descriptor `run` made, whose `owner` is a vector
        // `run` borrows mutably for the whole call; the kernel holds no other reference to it
        // beyond the `data` pointer it reloads after this call.
        let (descriptor, data) = unsafe { (&mut *a, &mut *(*a).owner) };
        let n = n.max(0) as usize;
        let extra = n.saturating_sub(data.len());
        let bytes = extra as u128 * data.elem().size() as u128;
        let fail = |why: String| {
            GROW_FAILURE.with(|g| g.set(Some(why)));
            false
        };
        const GIB: f64 = (1u64 << 30) as f64;
        // Only growth that matters is checked (a sparse result grows by doubling, so a large
        // one always gets here). Measured: checking every grow of 32 row ranges tripled
        // luxembourg's two-thread A·Aᵀ.
        if let Some(avail) = nm_runtime::memory::available_for(bytes).filter(|&a| bytes > a) {
            return fail(format!(
                "growing an output to {n} elements needs {:.1} GiB more, {:.1} GiB available",
                bytes as f64 / GIB,
                avail as f64 / GIB
            ));
        }
        let capacity = data.capacity();
        let peers = peers_in_step(a);
        let reserved = if zero {
            data.try_reserve(extra, &peers)
        } else {
            // What the kernel wrote so far lies below its descriptor's length.
            data.reserve_unwritten(descriptor.len.max(0) as usize, n, &peers)
        };
        if reserved.is_err() {
            return fail(format!("growing an output to {n} elements failed ({:.1} GiB)", bytes as f64 / GIB));
        }
        if data.capacity() != capacity {
            data.advise_huge_pages();
        }
        if zero {
            data.resize(n);
        }
        let (ptr, len) = raw_parts(data);
        descriptor.data = ptr;
        descriptor.len = if zero { len as i64 } else { n as i64 };
        true
    }));
    match grown {
        Ok(true) => 0,
        _ => 1,
    }
}

/// Where the other arrays the running kernel appends to start (see `IN_STEP`), for `grow` to
/// place `a` apart from them.
fn peers_in_step(a: *const NmsArray) -> Vec<Peer> {
    IN_STEP.with(|s| {
        s.borrow()
            .iter()
            .filter(|&&(d, _)| d != a)
            // SAFETY: the descriptors `call` listed live until the kernel returns, which it has
            // not (it is in `grow`); only their `data` field is read.
            .map(|&(d, elem_size)| Peer { start: unsafe { (*d).data } as usize, elem_size })
            .collect()
    })
}

fn raw_parts(data: &mut ArrayData) -> (*mut libc::c_void, usize) {
    match data {
        ArrayData::I32(v) => (v.as_mut_ptr().cast(), v.len()),
        ArrayData::I64(v) => (v.as_mut_ptr().cast(), v.len()),
        ArrayData::U64(v) => (v.as_mut_ptr().cast(), v.len()),
        ArrayData::F32(v) => (v.as_mut_ptr().cast(), v.len()),
        ArrayData::F64(v) => (v.as_mut_ptr().cast(), v.len()),
        // `*mut` only to fit the descriptor: the kernel declares operands `const` and
        // `check_arguments` refuses a borrowed array where it writes.
        ArrayData::Borrowed(b) => (b.as_ptr().cast_mut(), b.len()),
        // The slot, not an array: the kernel reads its fields (see `nm_ism::Slot`).
        ArrayData::Workspace(w) => (w.slot().cast(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::{opt_level, row_cuts, threads_worth_copies};
    use crate::args::{ArrayData, Borrowed};
    use crate::ir::Function;
    use crate::jit::OptLevel;

    #[test]
    fn only_kernels_that_sweep_a_row_are_compiled_at_o3() {
        let kernel = |body: &str| {
            let text = format!(
                "kernel k(\n  out C_vals: [F64] Values {{ tensor: \"C\" }},\n  B1_crd: [I64] Crd {{ tensor: \"B\", level: 1 }},\n  B_vals: [F64] Values {{ tensor: \"B\" }},\n) {{\n{body}}}\n"
            );
            Function::parse(&text).unwrap()
        };
        // SpMM's inner loop: the loop's variable indexes the row added into.
        let swept =
            kernel("  for p in 0..8 {\n    for j in 0..64 {\n      C_vals[(p * 64) + j] += B_vals[j]\n    }\n  }\n");
        // SpGEMM's scatter: the index is a coordinate read from an operand.
        let scattered = kernel("  for p in 0..8 {\n    let j: Index = B1_crd[p]\n    C_vals[j] += B_vals[p]\n  }\n");
        // SDDMM's dot product: a sum kept in a variable, stored once.
        let reduced =
            kernel("  let acc: F64 = 0.0\n  for j in 0..64 {\n    acc = acc + B_vals[j]\n  }\n  C_vals[0] = acc\n");
        assert_eq!(opt_level(&[&swept]), OptLevel::O3);
        assert_eq!(opt_level(&[&scattered]), OptLevel::O2);
        assert_eq!(opt_level(&[&reduced]), OptLevel::O2);
        // One compiler run for a library: its kernels share the level the sweeping one needs.
        assert_eq!(opt_level(&[&scattered, &swept]), OptLevel::O3);
    }

    #[test]
    fn copies_of_a_reduction_are_made_only_where_they_pay() {
        // Two threads need more than 8 stored values per result element, three more than 9.
        assert_eq!(threads_worth_copies(8_000, 1_000, 2), 1);
        assert_eq!(threads_worth_copies(8_001, 1_000, 2), 2);
        assert_eq!(threads_worth_copies(9_001, 1_000, 3), 3);
        assert_eq!(threads_worth_copies(8_500, 1_000, 3), 2);
        // CSC SpMV on arrow (3 nonzeros per column) stays on one; bcsstk33 (68) takes two.
        assert_eq!(threads_worth_copies(139_498, 46_500, 2), 1);
        assert_eq!(threads_worth_copies(591_904, 8_738, 2), 2);
        assert_eq!(threads_worth_copies(0, 0, 4), 1);
        assert_eq!(threads_worth_copies(10, 0, 1), 1);
    }

    #[test]
    fn rows_are_cut_by_their_entries_where_an_operand_counts_them() {
        // Eight rows, the first holding 70 entries, the others one each: equal rows would put
        // row 0 with row 1 in one of four ranges; by entries and rows (85 in all, about 21 a
        // range) row 0 is a range alone and the other seven one more: two ranges, none empty.
        let pos: Vec<u32> = vec![0, 70, 71, 72, 73, 74, 75, 76, 77];
        let weights = ArrayData::Borrowed(Borrowed::U32(&pos));
        assert_eq!(row_cuts(8, 4, None), [0, 2, 4, 6, 8]);
        assert_eq!(row_cuts(8, 4, Some(&weights)), [0, 1, 8]);
        // Even rows: the same cuts as equal rows.
        let even: Vec<i64> = (0..=8).map(|r| 3 * r).collect();
        assert_eq!(row_cuts(8, 4, Some(&ArrayData::I64(even))), [0, 2, 4, 6, 8]);
        // Too short to weigh the rows: equal rows.
        assert_eq!(row_cuts(8, 4, Some(&ArrayData::I64(vec![0, 1, 2]))), [0, 2, 4, 6, 8]);
        // Every cut within the rows and in order, whatever the weights.
        let odd: Vec<i64> = vec![5, 3, 9, 1, 0, 7, 7, 2, 4];
        let cuts = row_cuts(8, 4, Some(&ArrayData::I64(odd)));
        assert!(cuts.windows(2).all(|w| w[0] < w[1]) && cuts[0] == 0 && cuts.last() == Some(&8), "{cuts:?}");
    }
}
