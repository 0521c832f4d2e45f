//! [`Kernel`]: a compiled statement — generated loops (compiled C or the interpreter) or
//! nm-spmm's N:M kernel — with what it reads through copies and views and the kernels it
//! runs first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nm_format::{Format, Tensor, TensorView};
use nm_ir::notation::IndexNotation;
use nm_ir::plan::Plan;
use nm_lower::args::ArrayData;
use nm_lower::assemble::Split;
use nm_lower::c::CKernel;
use nm_lower::ir::{Function, OmpSchedule};
use nm_lower::jit::CCompiler;
use nm_lower::lower::{IndexWidths, LowerOptions, Lowered, lower_plan};

use super::program::Program;
use super::{Backend, Error, NmSpmm, Scalar, nm_route};

/// What the generated code looks like, beyond what the lowering decides.
#[derive(Clone, Debug, Default)]
pub(crate) struct CodeOptions {
    /// Prefix of the functions' names.
    pub prefix: String,
    /// The OpenMP schedule of parallel loops (`None`: the lowering's).
    pub omp_schedule: Option<OmpSchedule>,
    /// An assembly and a compute kernel where the result is sparse ([`nm_lower::assemble`]).
    pub separate_assembly: bool,
}

/// What runs a kernel.
pub(crate) enum Engine {
    /// Generated code (or the interpreter).
    Generated {
        /// For the index widths the program was compiled for.
        narrow: Arc<Specialization>,
        /// For operands with other index widths, made when first needed.
        wide: Mutex<Vec<Arc<Specialization>>>,
    },
    /// nm-spmm's `C = A·B`.
    NmSpmm(NmSpmm),
}

impl Engine {
    pub(crate) fn generated(narrow: Specialization) -> Engine {
        Engine::Generated { narrow: Arc::new(narrow), wide: Mutex::new(Vec::new()) }
    }
}

/// A clone shares the compiled code and every specialization made so far.
impl Clone for Engine {
    fn clone(&self) -> Engine {
        match self {
            Engine::Generated { narrow, wide } => Engine::Generated {
                narrow: narrow.clone(),
                wide: Mutex::new(wide.lock().unwrap_or_else(|e| e.into_inner()).clone()),
            },
            Engine::NmSpmm(route) => Engine::NmSpmm(route.clone()),
        }
    }
}

/// A kernel lowered (and compiled) for one set of operand index widths.
pub(crate) struct Specialization {
    /// The statement's plan, which every specialization lowers.
    pub plan: Arc<Plan>,
    pub widths: IndexWidths,
    /// The loops that assemble and compute at once.
    pub lowered: Lowered,
    /// The assembly and compute halves, when they run apart.
    pub halves: Option<Split>,
    /// Compiled C: the fused kernel, or assembly then compute; empty for the interpreter.
    pub compiled: Vec<CKernel>,
    /// Sparse workspaces of the last run (by parameter), emptied by their `finish` and kept
    /// with their memory: a fresh workspace grows its buckets and arrays anew each run.
    pub kept: Mutex<Vec<(usize, ArrayData<'static>)>>,
}

impl Specialization {
    /// Lowers `plan` for `widths` and compiles it — from `source` (C written for the
    /// generated functions' arguments) when one is given.
    pub(crate) fn new<T: Scalar>(
        plan: Arc<Plan>,
        backend: Backend,
        widths: IndexWidths,
        options: &LowerOptions,
        code: &CodeOptions,
        source: Option<&str>,
    ) -> Result<Specialization, Error> {
        let mut lowered = lower_plan(&plan, T::ELEM, &widths, options)?;
        lowered.function.name = format!("{}{}", code.prefix, lowered.function.name);
        if let Some(schedule) = code.omp_schedule {
            lowered.function.omp_schedule = schedule;
        }
        let halves = if code.separate_assembly { nm_lower::assemble::split(&lowered.function) } else { None };
        let functions: Vec<&Function> = match &halves {
            Some(h) => vec![&h.assemble, &h.compute],
            None => vec![&lowered.function],
        };
        let compiled = match backend {
            Backend::Interp => Vec::new(),
            Backend::Jit => {
                let cc = CCompiler::from_env()?;
                match source {
                    Some(source) => functions
                        .into_iter()
                        .map(|f| CKernel::compile_source(f, source, &cc))
                        .collect::<Result<_, _>>()?,
                    // Assembly and compute in one object: one compiler run, one load.
                    None => CKernel::compile_library(&functions, &cc)?,
                }
            }
        };
        Ok(Specialization { plan, widths, lowered, halves, compiled, kept: Mutex::new(Vec::new()) })
    }

    /// The index in [`Specialization::functions`] of the function that computes the values:
    /// the fused one, or the compute half after assembly.
    pub(crate) fn compute_index(&self) -> usize {
        usize::from(self.halves.is_some())
    }

    /// The functions that run, in order: the fused one, or assembly then compute.
    pub(crate) fn functions(&self) -> Vec<&Function> {
        match &self.halves {
            Some(h) => vec![&h.assemble, &h.compute],
            None => vec![&self.lowered.function],
        }
    }
}

/// A compiled statement, ready to run on tensors of value type `T`. Operands are read in
/// place, never copied. A clone shares the compiled code (cloning compiles nothing).
#[derive(Clone)]
pub struct Kernel<T> {
    pub(super) stmt: IndexNotation,
    pub(super) shapes: HashMap<String, (Vec<usize>, Option<Format>)>,
    backend: Backend,
    options: LowerOptions,
    code: CodeOptions,
    /// C written for the generated functions' arguments, compiled in their place
    /// ([`Kernel::from_source`]).
    source: Option<Arc<str>>,
    pub(super) engine: Engine,
    pub(super) result_shape: Vec<usize>,
    pub(super) result_format: Option<Format>,
    pub(super) threads: usize,
    /// Operands read through a copy, and the declarations they are given in.
    pub(super) conversions: crate::conversion::Conversion,
    pub(super) declared: HashMap<String, (Vec<usize>, Option<Format>)>,
    /// Reads of an operand in another order than its first, given a tensor of their own:
    /// `(view, operand)`, the view bound to the operand's tensor at each run.
    pub(super) views: Vec<(String, String)>,
    /// Kernels run first, each computing a temporary this kernel reads (`(temporary, kernel)`:
    /// see [`IndexNotation::split_reduced_terms`]).
    pub(super) parts: Vec<(String, Kernel<T>)>,
    /// What the schedule's commands that change nothing here say ([`nm_ir::concrete::Command::note`]).
    schedule_notes: Vec<String>,
    _value: std::marker::PhantomData<T>,
}

impl<T: Scalar> Kernel<T> {
    #[allow(clippy::too_many_arguments)] // the program's parts and what compiling it made
    pub(super) fn new(
        program: &Program,
        backend: Backend,
        engine: Engine,
        result_shape: Vec<usize>,
        result_format: Option<Format>,
        schedule_notes: Vec<String>,
    ) -> Kernel<T> {
        // A schedule that parallelizes the outer loop asks for threads: it gets every core
        // unless `with_threads` says otherwise (the interpreter runs one).
        let threads = match &engine {
            Engine::Generated { narrow, .. } if !narrow.compiled.is_empty() => narrow.lowered.default_threads(),
            _ => 1,
        };
        Kernel {
            stmt: program.stmt.clone(),
            shapes: program.shapes.clone(),
            backend,
            options: program.options.clone(),
            code: program.code.clone(),
            source: None,
            engine,
            result_shape,
            result_format,
            threads,
            conversions: Vec::new(),
            declared: HashMap::new(),
            views: Vec::new(),
            parts: Vec::new(),
            schedule_notes,
            _value: std::marker::PhantomData,
        }
    }

    /// Runs on `threads` threads where the kernel's outer loop names disjoint rows of the
    /// result (see [`Kernel::parallel`]) or it is the N:M SpMM — the result is the same bit for
    /// bit — or where it is a reduction into a dense result: each thread adds into its own copy,
    /// the copies are summed in thread order (the same sums for the same thread count; another
    /// count may round differently), or the ranges add atomically where the schedule says
    /// `atomics`. Otherwise on one thread. At most [`MAX_THREADS`](nm_runtime::workers::MAX_THREADS) run
    /// (more would only wait for one another): a larger count is taken as that.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.clamp(1, nm_runtime::workers::MAX_THREADS);
        self.parts = std::mem::take(&mut self.parts).into_iter().map(|(n, k)| (n, k.with_threads(threads))).collect();
        self
    }

    /// The threads runs use: [`Kernel::with_threads`]' count, or by default every core where
    /// the schedule parallelizes the outer loop and one otherwise.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The same kernel with its generated functions compiled from `source` instead (taco's
    /// `-read-source`): C that defines each function [`Kernel::functions`] lists, by the same
    /// name and taking the same arguments as the generated C does. Its results are the
    /// source's; the arrays it is run on are checked as for generated code.
    pub fn from_source(&self, source: &str) -> Result<Kernel<T>, Error> {
        let Engine::Generated { narrow, .. } = &self.engine else {
            return Err(Error::Operands("the N:M SpMM runs nm-spmm's kernel, not generated code".into()));
        };
        if self.backend != Backend::Jit || !self.parts.is_empty() {
            return Err(Error::Operands("a source replaces the compiled C of a single generated kernel".into()));
        }
        let mut kernel = self.same_with(Engine::generated(Specialization::new::<T>(
            narrow.plan.clone(),
            self.backend,
            narrow.widths.clone(),
            &self.options,
            &self.code,
            Some(source),
        )?));
        kernel.source = Some(source.into());
        Ok(kernel)
    }

    /// This kernel run by `engine`.
    fn same_with(&self, engine: Engine) -> Kernel<T> {
        Kernel {
            stmt: self.stmt.clone(),
            shapes: self.shapes.clone(),
            backend: self.backend,
            options: self.options.clone(),
            code: self.code.clone(),
            source: self.source.clone(),
            engine,
            result_shape: self.result_shape.clone(),
            result_format: self.result_format.clone(),
            threads: self.threads,
            conversions: self.conversions.clone(),
            declared: self.declared.clone(),
            views: self.views.clone(),
            parts: Vec::new(),
            schedule_notes: self.schedule_notes.clone(),
            _value: std::marker::PhantomData,
        }
    }

    /// The kernels that run before this one, each computing a temporary it reads: a sum
    /// whose terms need loop orders of their own (`A(i,j) = B(i,k) * C(k,j) + D(i,j)` into
    /// CSR runs `t0(i,j) = B(i,k) * C(k,j)`, then `A(i,j) = t0(i,j) + D(i,j)`); empty for one
    /// kernel.
    pub fn parts(&self) -> &[(String, Kernel<T>)] {
        &self.parts
    }

    /// What the lowering decided that a user should hear about, its parts' first (a result
    /// loop that visits every coordinate, a dense workspace replaced by a sparse one).
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self.parts.iter().flat_map(|(_, k)| k.notes()).collect();
        notes.extend(self.schedule_notes.iter().cloned());
        if let Engine::Generated { narrow, .. } = &self.engine {
            notes.extend(narrow.lowered.notes.iter().cloned());
        }
        notes
    }

    /// What runs, in a few lines a person reads (the C library's `nms_kernel_describe`, the
    /// API's `-print-compute` without the code): the statement, the kernel that runs it —
    /// generated loops (compiled C or the interpreter) or nm-spmm's hand-written N:M SpMM — and
    /// on how many threads, the operands read through copies or views, the kernels run
    /// first, and the notes.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (temporary, part) in &self.parts {
            out.push_str(&format!("first, into the temporary `{temporary}`:\n"));
            for line in part.describe().lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out.push_str(&format!("statement: {}\n", self.stmt));
        let threads = match (self.threads, self.parallel()) {
            (1, _) => "1 thread".to_string(),
            (n, true) => format!("{n} threads"),
            (n, false) => format!("1 thread ({n} asked for: {})", super::why_one_thread(self.interpreted())),
        };
        let engine = match &self.engine {
            Engine::NmSpmm(route) => nm_route::describe(route),
            Engine::Generated { narrow, .. } if narrow.compiled.is_empty() => {
                "a generated loop nest, run by the interpreter".to_string()
            }
            Engine::Generated { .. } => "a generated loop nest, compiled C".to_string(),
        };
        out.push_str(&format!("kernel: {engine}, on {threads}\n"));
        if !self.conversions.is_empty() {
            out.push_str(&format!("copies: {}\n", self.describe_conversions()));
        }
        for (view, operand) in &self.views {
            out.push_str(&format!("view: `{view}` reads `{operand}` in another order than its first read\n"));
        }
        if let Engine::Generated { narrow, .. } = &self.engine {
            for note in &narrow.lowered.notes {
                out.push_str(&format!("note: {note}\n"));
            }
        }
        out
    }

    /// [`Kernel::conversions`] in words: each operand, its declared format and its copy's.
    pub fn describe_conversions(&self) -> String {
        let declared = |n: &str| self.declared.get(n).and_then(|(_, f)| f.clone());
        crate::conversion::describe(&self.conversions, declared)
    }

    /// The statement this kernel runs (the combined one when it has [`Kernel::parts`]).
    pub fn statement(&self) -> &IndexNotation {
        &self.stmt
    }

    /// Whether the loops run in the interpreter.
    fn interpreted(&self) -> bool {
        matches!(&self.engine, Engine::Generated { narrow, .. } if narrow.compiled.is_empty())
    }

    /// Whether runs can use several threads: row ranges of the outer loop, the N:M SpMM, or
    /// loops the schedule put on OpenMP threads (`parallelize(v, cpu_thread, no_races)` on a
    /// loop that is not a row range), run on this kernel's thread count.
    pub fn parallel(&self) -> bool {
        match &self.engine {
            Engine::Generated { narrow, .. } => {
                !narrow.compiled.is_empty()
                    && (narrow.lowered.partition.is_some()
                        || nm_lower::ir::has_parallel_loops(&narrow.lowered.function))
            }
            Engine::NmSpmm(_) => true,
        }
    }

    /// Why this kernel runs on one thread when it is asked for several (`None` when it runs
    /// on them).
    pub fn why_one_thread(&self) -> Option<&'static str> {
        (!self.parallel()).then(|| super::why_one_thread(self.interpreted()))
    }

    /// The loop IR that assembles and computes at once (for the index widths compiled
    /// first); `None` for the N:M SpMM kernel.
    pub fn loops(&self) -> Option<&Function> {
        match &self.engine {
            Engine::Generated { narrow, .. } => Some(&narrow.lowered.function),
            Engine::NmSpmm(_) => None,
        }
    }

    /// The functions that run, in order: [`Kernel::loops`], or its assembly and compute
    /// halves where [`Program::separate_assembly`] asked for them and the result is sparse.
    /// Empty for the N:M SpMM kernel.
    pub fn functions(&self) -> Vec<&Function> {
        match &self.engine {
            Engine::Generated { narrow, .. } => narrow.functions(),
            Engine::NmSpmm(_) => Vec::new(),
        }
    }

    /// The compiled C of [`Kernel::functions`], when compiled.
    pub fn compiled(&self) -> &[CKernel] {
        match &self.engine {
            Engine::Generated { narrow, .. } => &narrow.compiled,
            Engine::NmSpmm(_) => &[],
        }
    }

    /// The N:M SpMM route, where nm-spmm's kernel runs this statement.
    pub(crate) fn nm_route(&self) -> Option<&NmSpmm> {
        match &self.engine {
            Engine::NmSpmm(route) => Some(route),
            Engine::Generated { .. } => None,
        }
    }

    /// The operands read through a copy in another format (empty when every operand is read in
    /// place), with the copy's format.
    pub fn conversions(&self) -> &[(String, Format)] {
        &self.conversions
    }

    /// The reads of an operand in another order than its first that read it as a view of
    /// their own (`(view, operand)`; see [`IndexNotation::with_views`]), each bound to the
    /// operand's tensor at each run.
    pub fn views(&self) -> &[(String, String)] {
        &self.views
    }

    /// The names of the operands a run takes: the statement's tensors but its result (and the
    /// temporaries and views the kernel makes itself).
    pub fn operand_names(&self) -> Vec<String> {
        let made: Vec<&str> =
            self.parts.iter().map(|(n, _)| n.as_str()).chain(self.views.iter().map(|(v, _)| v.as_str())).collect();
        let mut names: Vec<String> = self.parts.iter().flat_map(|(_, k)| k.operand_names()).collect();
        for (id, t) in self.stmt.tensors.iter() {
            if id != self.stmt.lhs.tensor && !made.contains(&t.name.as_str()) {
                names.push(t.name.clone());
            }
        }
        let mut unique = Vec::new();
        for n in names {
            if !unique.contains(&n) {
                unique.push(n);
            }
        }
        unique
    }

    /// Refuses operands that would be ignored or ambiguous: a name given twice, a name that is
    /// not an operand (a typo would otherwise leave the real operand missing, or be dropped
    /// silently), the result's name.
    pub(super) fn check_operands(&self, operands: &[(&str, TensorView<T>)]) -> Result<(), Error> {
        let expected = self.operand_names();
        let result = self.stmt.tensor_name(self.stmt.lhs.tensor);
        for (k, (name, _)) in operands.iter().enumerate() {
            let name = *name;
            if operands[..k].iter().any(|(n, _)| *n == name) {
                return Err(Error::Operands(format!("`{name}` is given twice")));
            }
            if name == result {
                return Err(Error::Operands(format!("`{name}` is the result, which the kernel computes")));
            }
            if !expected.iter().any(|n| n == name) {
                let list: Vec<String> = expected.iter().map(|n| format!("`{n}`")).collect();
                return Err(Error::Operands(format!(
                    "`{name}` is not an operand of `{}` (its operands: {})",
                    self.stmt,
                    list.join(", ")
                )));
            }
        }
        if let Some(missing) = expected.iter().find(|n| !operands.iter().any(|(g, _)| g == n)) {
            return Err(Error::Missing(format!("no tensor given for `{missing}`")));
        }
        Ok(())
    }

    /// Runs on the operands (by name; each in its declared format) and returns the result.
    /// Every operand is given once; a name given twice, one the statement does not read, or
    /// the result's is [`Error::Operands`].
    pub fn run(&self, operands: &[(&str, &Tensor<T>)]) -> Result<Tensor<T>, Error> {
        let views: Vec<(&str, TensorView<T>)> = operands.iter().map(|(n, t)| (*n, t.view())).collect();
        self.run_views(&views)
    }

    /// [`Kernel::run`] on operands whose arrays someone else owns ([`TensorView`]), read in
    /// place: only the operands listed in [`Kernel::conversions`] are copied.
    pub fn run_views(&self, operands: &[(&str, TensorView<T>)]) -> Result<Tensor<T>, Error> {
        self.check_operands(operands)?;
        self.run_checked(operands)
    }

    /// [`Kernel::run_views`] on operands already checked.
    pub(super) fn run_checked(&self, operands: &[(&str, TensorView<T>)]) -> Result<Tensor<T>, Error> {
        if !self.parts.is_empty() {
            let mut temporaries = Vec::with_capacity(self.parts.len());
            for (name, part) in &self.parts {
                // Each part reads some of the operands.
                let mine = part.operand_names();
                let given: Vec<(&str, TensorView<T>)> =
                    operands.iter().filter(|(n, _)| mine.iter().any(|m| m == n)).cloned().collect();
                temporaries.push((name.as_str(), part.run_checked(&given)?));
            }
            let mut all = operands.to_vec();
            all.extend(temporaries.iter().map(|(n, t)| (*n, t.view())));
            return self.bind_parts_done(&all, |bound| bound.run_once());
        }
        self.bind_parts_done(operands, |bound| bound.run_once())
    }

    /// The kernel for operands with `widths`, lowered and compiled the first time.
    pub(super) fn specialization(&self, widths: IndexWidths) -> Result<Arc<Specialization>, Error> {
        let Engine::Generated { narrow, wide } = &self.engine else { unreachable!("generated code has widths") };
        if widths == narrow.widths {
            return Ok(narrow.clone());
        }
        let mut wide = wide.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = wide.iter().find(|s| s.widths == widths) {
            return Ok(s.clone());
        }
        let s = Arc::new(Specialization::new::<T>(
            narrow.plan.clone(),
            self.backend,
            widths,
            &self.options,
            &self.code,
            self.source.as_deref(),
        )?);
        wide.push(s.clone());
        Ok(s)
    }
}
