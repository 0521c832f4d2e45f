//! The Rust API: declare tensors, compile an expression, run it on [`Tensor`]s.
//!
//! The example is in the crate documentation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nm_format::{Format, Tensor, TensorView};
use nm_ir::concrete::{ConcreteNotation, concretize_for, parse_schedule};
use nm_ir::notation::{Declarations, IndexNotation, TensorType, Types, parse};
use nm_lower::c::CKernel;
use nm_lower::interp::interpret;
use nm_lower::jit::CCompiler;
use nm_lower::lower::{
    IndexWidths, KernelValue, LowerOptions, Lowered, lower_options, take_result_tensor, view_arguments,
};

/// Everything that can go wrong from expression to result, with the stage's own message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The expression or schedule does not parse.
    #[error(transparent)]
    Parse(#[from] nm_ir::notation::ParseError),
    /// A format string does not parse.
    #[error(transparent)]
    Format(#[from] nm_format::FormatError),
    /// The statement does not type-check against the declarations.
    #[error(transparent)]
    Semantic(#[from] nm_ir::notation::SemanticError),
    /// A scheduling command is illegal.
    #[error(transparent)]
    Schedule(#[from] nm_ir::concrete::ScheduleError),
    /// The statement is not lowered (yet).
    #[error(transparent)]
    Lower(#[from] nm_lower::lower::LowerError),
    /// Compiling or loading the C kernel failed.
    #[error(transparent)]
    Jit(#[from] nm_lower::jit::JitError),
    /// Running the C kernel failed.
    #[error(transparent)]
    Run(#[from] nm_lower::c::RunError),
    /// Running the interpreter failed.
    #[error(transparent)]
    Interp(#[from] nm_lower::interp::InterpError),
    /// A tensor does not match its declaration, or the result does not validate.
    #[error(transparent)]
    Tensor(#[from] nm_format::TensorError),
    /// The N:M SpMM kernel refused its operands.
    #[error(transparent)]
    Spmm(#[from] nm_spmm::SpmmError),
    /// A tensor the statement names but no declaration or argument gives.
    #[error("{0}")]
    Missing(String),
    /// The operands given to a run: a name given twice, one that is not an operand of the
    /// statement, or the result's.
    #[error("{0}")]
    Operands(String),
}

/// A value type kernels run on: `f32` or `f64` (what both the generated kernels and the
/// hand-written N:M kernels need).
pub trait Scalar: KernelValue + nm_spmm::Real {}

impl<T: KernelValue + nm_spmm::Real> Scalar for T {}

/// Which back end runs a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Generated C, compiled by the system compiler and loaded (cached on disk).
    Jit,
    /// The loop-IR interpreter (no compiler needed).
    Interp,
}

/// An expression and the declarations of its tensors.
#[derive(Clone, Debug)]
pub struct Program {
    stmt: IndexNotation,
    decls: Declarations,
    shapes: HashMap<String, (Vec<usize>, Option<Format>)>,
    schedule: Option<String>,
    options: LowerOptions,
}

impl Program {
    /// Parses `expr` (taco's index notation).
    pub fn new(expr: &str) -> Result<Program, Error> {
        Ok(Program {
            stmt: parse(expr)?,
            decls: Declarations::new(),
            shapes: HashMap::new(),
            schedule: None,
            options: LowerOptions::default(),
        })
    }

    /// Declares tensor `name` with `shape` stored in `format` (`"dense"`, `"csr"`, `"ds:1,0"`,
    /// `"nm(2,4,16)"`, ...).
    pub fn tensor(self, name: &str, shape: &[usize], format: &str) -> Result<Program, Error> {
        let f = Format::parse(format, shape.len().max(1))?;
        Ok(self.declare(name, shape, f))
    }

    pub(crate) fn declare(mut self, name: &str, shape: &[usize], f: Format) -> Program {
        let dense = f == Format::dense(f.order());
        let ty =
            if dense || shape.is_empty() { TensorType::dense(shape) } else { TensorType::sparse(shape, f.clone()) };
        self.decls = self.decls.tensor(name, ty);
        self.shapes.insert(name.to_string(), (shape.to_vec(), (!dense).then_some(f)));
        self
    }

    /// Gives an index variable a size (needed when only compound subscripts use it).
    pub fn index_size(mut self, var: &str, size: usize) -> Program {
        self.decls = self.decls.index_size(var, size);
        self
    }

    /// Sets the schedule (`"reorder(k, j); parallelize(i, cpu_thread, no_races)"`).
    pub fn schedule(mut self, schedule: &str) -> Program {
        self.schedule = Some(schedule.to_string());
        self
    }

    /// The workspace of a statement that scatters into a sparse result (see [`crate::ism`]);
    /// by default the analysis picks one.
    pub fn workspace(mut self, config: crate::ism::Config) -> Program {
        self.options.workspace = Some(config);
        self
    }

    /// The statement.
    pub fn statement(&self) -> &IndexNotation {
        &self.stmt
    }

    /// Checks, concretizes and schedules: the CIN a kernel is lowered from, and the types.
    pub fn concrete(&self) -> Result<(ConcreteNotation, Types), Error> {
        let types = self.stmt.check(&self.decls)?;
        let mut cin = concretize_for(&self.stmt, &types);
        if let Some(s) = &self.schedule {
            cin = cin.schedule_sized(&parse_schedule(s)?, &types.sizes)?;
            cin.check_bounds(&types.sizes)?;
        }
        Ok((cin, types))
    }

    /// Lowers and (for [`Backend::Jit`]) compiles for values of type `T`, for operands with
    /// 32-bit positions and coordinates (what nm-format stores whenever they fit); operands
    /// stored with 64-bit ones get a kernel of their own on first use. `C(i,j) = A(i,k) *
    /// B(k,j)` with `B` in `nm(N,M,L)` and `A`, `C` dense runs nm-spmm's hand-written kernel
    /// instead (the lowering does not generate code for blocked N:M levels).
    ///
    /// An operand the lowering cannot read as declared (an N:M format in a sum, a mode order
    /// against the loop order, ...) is read through a copy in CSF in a mode order it can
    /// read, made at each run ([`Kernel::conversions`] lists them). A sum whose terms need
    /// loop orders of their own and that no copy helps runs as several kernels, each term with
    /// a reduction into a temporary first ([`Kernel::parts`]). Explicit `sum`s inside a
    /// product that lower as no `where` are left implicit, where that sums the same terms
    /// ([`IndexNotation::without_sums`]): the product is then one nest.
    pub fn compile<T: Scalar>(&self, backend: Backend) -> Result<Kernel<T>, Error> {
        self.decls.check_names(&self.stmt)?;
        self.compile_any::<T>(backend)
    }

    /// [`Program::compile`] after its name check: also the statements it splits a sum into,
    /// which keep every declaration of the whole.
    fn compile_any<T: Scalar>(&self, backend: Backend) -> Result<Kernel<T>, Error> {
        let first = match self.compile_declared::<T>(backend) {
            Err(Error::Lower(e)) => e,
            other => return other,
        };
        if let Some(kernel) = self.compile_converted::<T>(backend)? {
            return Ok(kernel);
        }
        // A sparse operand read in two orders (`B(i,j) + B(j,i)`): its other reads get a view
        // of their own, which can be read through a copy in another order.
        let sparse = |name: &str| self.shapes.get(name).is_some_and(|(_, f)| f.is_some());
        if let Some((stmt, views)) = self.stmt.with_views(sparse) {
            let mut program = Program { stmt, ..self.clone() };
            for (view, operand) in &views {
                let (shape, format) = self.shapes[operand].clone();
                program = program.declare(view, &shape, format.unwrap_or_else(|| Format::dense(shape.len().max(1))));
            }
            let kernel = match program.compile_declared::<T>(backend) {
                Ok(kernel) => Some(kernel),
                Err(Error::Lower(_)) => program.compile_converted::<T>(backend)?,
                Err(other) => return Err(other),
            };
            if let Some(mut kernel) = kernel {
                kernel.views = views;
                return Ok(kernel);
            }
        }
        // A sum whose terms need loop orders of their own (`B(i,k) * C(k,j) + D(i,j)` into
        // CSR): each reduced term into a temporary by a kernel of its own, then the sum.
        if self.schedule.is_none()
            && let Some(kernel) = self.compile_split::<T>(backend)?
        {
            return Ok(kernel);
        }
        // Explicit sums inside a product (a split's term `t0(i,j) = C(i) * sum(k, D(k,j))` into
        // a sparse result): one nest over every variable, where the `where` computing the sum
        // could not follow `D`'s columns.
        if self.schedule.is_none()
            && let Some(stmt) = self.stmt.without_sums()
        {
            match (Program { stmt, ..self.clone() }).compile_any::<T>(backend) {
                Err(Error::Lower(_)) => {}
                other => return other,
            }
        }
        // Last, a loop over a sparse result's coordinates that no operand makes sparse: it then
        // visits every coordinate (`LowerOptions::visit_every_coordinate`, said in the kernel's
        // notes).
        if !self.options.visit_every_coordinate {
            let mut program = self.clone();
            program.options.visit_every_coordinate = true;
            match program.compile_any::<T>(backend) {
                Err(Error::Lower(_)) => {}
                other => return other,
            }
        }
        Err(Error::Lower(first))
    }

    /// The kernel of [`IndexNotation::split_reduced_terms`]' combined statement, with the
    /// kernels of its terms as parts; `None` when the statement does not split or a part does
    /// not lower. A temporary with every variable of the result is stored in the result's
    /// format; any other is stored dense into a dense result, and with every level compressed
    /// into a sparse one.
    fn compile_split<T: Scalar>(&self, backend: Backend) -> Result<Option<Kernel<T>>, Error> {
        let Some(split) = self.stmt.split_reduced_terms() else { return Ok(None) };
        let result = self.stmt.tensor_name(self.stmt.lhs.tensor);
        let Some((shape, format)) = self.shapes.get(result).cloned() else { return Ok(None) };
        let lhs_vars: Vec<&str> =
            self.stmt.lhs.subscripts.iter().flat_map(|t| t.vars()).map(|v| self.stmt.var_name(v)).collect();
        let mut temporaries = Vec::new();
        for term in &split.terms {
            let vars: Vec<&str> = term.lhs.subscripts.iter().flat_map(|t| t.vars()).map(|v| term.var_name(v)).collect();
            let dims: Vec<usize> =
                vars.iter().map(|v| lhs_vars.iter().position(|w| w == v).map_or(1, |d| shape[d])).collect();
            // Into a sparse result, a temporary of fewer variables is sparse too (every level
            // compressed): it then holds only the elements its term has, which is where the sum
            // has terms from it (a dense one would have the result store every element).
            // A scalar has no such form: whether its sum has a term would be lost, so a sparse
            // result does not split off a scalar term.
            let f = match &format {
                Some(f) if vars.len() == lhs_vars.len() => f.clone(),
                Some(f) if *f != Format::dense(f.order()) && vars.is_empty() => return Ok(None),
                Some(f) if *f != Format::dense(f.order()) => Format::csf(dims.len()),
                _ => Format::dense(dims.len().max(1)),
            };
            temporaries.push((term.tensor_name(term.lhs.tensor).to_string(), dims, f));
        }
        let mut parts = Vec::new();
        for (term, (name, dims, f)) in split.terms.iter().zip(&temporaries) {
            let program = Program { stmt: term.clone(), ..self.clone() }.declare(name, dims, f.clone());
            match program.compile_any::<T>(backend) {
                Ok(kernel) => parts.push((name.clone(), kernel)),
                Err(Error::Lower(_)) => return Ok(None),
                Err(other) => return Err(other),
            }
        }
        let mut program = Program { stmt: split.combined, ..self.clone() };
        for (name, dims, f) in &temporaries {
            program = program.declare(name, dims, f.clone());
        }
        match program.compile_any::<T>(backend) {
            Ok(mut kernel) => {
                kernel.parts = parts;
                Ok(Some(kernel))
            }
            Err(Error::Lower(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// The kernel with some operands read through a copy: the first conversion that lowers.
    fn compile_converted<T: Scalar>(&self, backend: Backend) -> Result<Option<Kernel<T>>, Error> {
        let declared = |name: &str| self.shapes.get(name).and_then(|(_, f)| f.clone());
        let loop_order = self.concrete()?.0.unscheduled_loop_order();
        for conversion in crate::conversion::candidates(&self.stmt, declared, &loop_order) {
            let mut program = self.clone();
            for (name, format) in &conversion {
                let shape = self.shapes[name].0.clone();
                program = program.declare(name, &shape, format.clone());
            }
            match program.compile_declared::<T>(backend) {
                Ok(mut kernel) => {
                    kernel.conversions = conversion;
                    kernel.declared = self.shapes.clone();
                    return Ok(Some(kernel));
                }
                Err(Error::Lower(_)) => continue,
                Err(other) => return Err(other),
            }
        }
        Ok(None)
    }

    fn compile_declared<T: Scalar>(&self, backend: Backend) -> Result<Kernel<T>, Error> {
        let (cin, types) = self.concrete()?;
        let result = self.stmt.tensor_name(self.stmt.lhs.tensor).to_string();
        let (shape, format) = self
            .shapes
            .get(&result)
            .cloned()
            .ok_or_else(|| Error::Missing(format!("the result `{result}` is not declared")))?;
        let format_of = |t| self.shapes.get(self.stmt.tensor_name(t)).and_then(|(_, f)| f.clone());
        let engine = match crate::commands::recognise_nm_spmm(&self.stmt, format_of) {
            Some(route) => Engine::NmSpmm(route),
            None => Engine::Generated {
                narrow: Box::new(Specialization::new::<T>(
                    &cin,
                    &types,
                    backend,
                    IndexWidths::default(),
                    &self.options,
                )?),
                wide: Mutex::new(Vec::new()),
            },
        };
        // A schedule that parallelizes the outer loop asks for threads: it gets every core
        // unless `with_threads` says otherwise (the interpreter runs one).
        let threads = match &engine {
            Engine::Generated { narrow, .. } if narrow.compiled.is_some() => narrow.lowered.default_threads(),
            _ => 1,
        };
        Ok(Kernel {
            stmt: self.stmt.clone(),
            shapes: self.shapes.clone(),
            cin,
            types,
            backend,
            options: self.options.clone(),
            engine,
            result_shape: shape,
            result_format: format,
            threads,
            conversions: Vec::new(),
            declared: HashMap::new(),
            views: Vec::new(),
            parts: Vec::new(),
            schedule_notes: match &self.schedule {
                Some(s) => parse_schedule(s)?.iter().filter_map(|c| c.note()).collect(),
                None => Vec::new(),
            },
            _value: std::marker::PhantomData,
        })
    }
}

/// What runs a kernel.
enum Engine {
    /// Generated code (or the interpreter).
    Generated {
        /// For operands with 32-bit index arrays.
        narrow: Box<Specialization>,
        /// For operands with some 64-bit index arrays, made when first needed.
        wide: Mutex<Vec<Arc<Specialization>>>,
    },
    /// nm-spmm's `C = A·B`.
    NmSpmm(crate::commands::NmSpmm),
}

/// A kernel lowered (and compiled) for one set of operand index widths.
struct Specialization {
    widths: IndexWidths,
    lowered: Lowered,
    compiled: Option<CKernel>,
    /// Sparse workspaces of the last run (by parameter), emptied by their `finish` and kept
    /// with their memory: a fresh workspace grows its buckets and arrays anew each run.
    kept: Mutex<Vec<(usize, nm_lower::interp::ArrayData<'static>)>>,
}

impl Specialization {
    fn new<T: KernelValue>(
        cin: &ConcreteNotation,
        types: &Types,
        backend: Backend,
        widths: IndexWidths,
        options: &LowerOptions,
    ) -> Result<Specialization, Error> {
        let lowered = lower_options(cin, types, T::ELEM, &widths, options)?;
        let compiled = match backend {
            Backend::Jit => Some(CKernel::compile(&lowered.function, &CCompiler::from_env()?)?),
            Backend::Interp => None,
        };
        Ok(Specialization { widths, lowered, compiled, kept: Mutex::new(Vec::new()) })
    }
}

/// A compiled statement, ready to run on tensors of value type `T`. Operands are read in
/// place, never copied.
pub struct Kernel<T> {
    stmt: IndexNotation,
    shapes: HashMap<String, (Vec<usize>, Option<Format>)>,
    cin: ConcreteNotation,
    types: Types,
    backend: Backend,
    options: LowerOptions,
    engine: Engine,
    result_shape: Vec<usize>,
    result_format: Option<Format>,
    threads: usize,
    /// Operands read through a copy, and the declarations they are given in.
    conversions: crate::conversion::Conversion,
    declared: HashMap<String, (Vec<usize>, Option<Format>)>,
    /// Reads of an operand in another order than its first, given a tensor of their own:
    /// `(view, operand)`, the view bound to the operand's tensor at each run.
    views: Vec<(String, String)>,
    /// Kernels run first, each computing a temporary this kernel reads (`(temporary, kernel)`:
    /// see [`IndexNotation::split_reduced_terms`]).
    parts: Vec<(String, Kernel<T>)>,
    /// What the schedule's commands that change nothing here say ([`nm_ir::concrete::Command::note`]).
    schedule_notes: Vec<String>,
    _value: std::marker::PhantomData<T>,
}

impl<T: Scalar> Kernel<T> {
    /// Runs on `threads` threads where the kernel's outer loop names disjoint rows of the
    /// result (see [`Kernel::parallel`]) or it is the N:M SpMM — the result is the same bit for
    /// bit — or where it is a reduction into a dense result: each thread adds into its own copy,
    /// the copies are summed in thread order (the same sums for the same thread count; another
    /// count may round differently), or the ranges add atomically where the schedule says
    /// `atomics`. Otherwise on one thread. At most [`MAX_THREADS`](nm_format::workers::MAX_THREADS) run
    /// (more would only wait for one another): a larger count is taken as that.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.clamp(1, nm_format::workers::MAX_THREADS);
        self.parts = std::mem::take(&mut self.parts).into_iter().map(|(n, k)| (n, k.with_threads(threads))).collect();
        self
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
            (n, false) => {
                let interpreted = matches!(&self.engine, Engine::Generated { narrow, .. } if narrow.compiled.is_none());
                let why = crate::commands::why_one_thread(interpreted);
                format!("1 thread ({n} asked for: {why})")
            }
        };
        let engine = match &self.engine {
            Engine::NmSpmm(route) => crate::commands::describe_nm_spmm(route),
            Engine::Generated { narrow, .. } => match &narrow.compiled {
                Some(_) => "a generated loop nest, compiled C".to_string(),
                None => "a generated loop nest, run by the interpreter".to_string(),
            },
        };
        out.push_str(&format!("kernel: {engine}, on {threads}\n"));
        if !self.conversions.is_empty() {
            let declared = |n: &str| self.declared.get(n).and_then(|(_, f)| f.clone());
            out.push_str(&format!("copies: {}\n", crate::conversion::describe(&self.conversions, declared)));
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

    /// The statement this kernel runs (the combined one when it has [`Kernel::parts`]).
    pub fn statement(&self) -> &IndexNotation {
        &self.stmt
    }

    /// Whether runs can use several threads: row ranges of the outer loop, the N:M SpMM, or
    /// loops the schedule put on OpenMP threads (`parallelize(v, cpu_thread, no_races)` on a
    /// loop that is not a row range), run on this kernel's thread count.
    pub fn parallel(&self) -> bool {
        match &self.engine {
            Engine::Generated { narrow, .. } => {
                narrow.compiled.is_some()
                    && (narrow.lowered.partition.is_some()
                        || nm_lower::ir::has_parallel_loops(&narrow.lowered.function))
            }
            Engine::NmSpmm(_) => true,
        }
    }

    /// The loop IR (for 32-bit operand indices); `None` for the N:M SpMM kernel.
    pub fn loops(&self) -> Option<&nm_lower::ir::Function> {
        match &self.engine {
            Engine::Generated { narrow, .. } => Some(&narrow.lowered.function),
            Engine::NmSpmm(_) => None,
        }
    }

    /// The C kernel (for 32-bit operand indices), when compiled.
    pub fn compiled(&self) -> Option<&CKernel> {
        match &self.engine {
            Engine::Generated { narrow, .. } => narrow.compiled.as_ref(),
            Engine::NmSpmm(_) => None,
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
    fn check_operands(&self, operands: &[(&str, TensorView<T>)]) -> Result<(), Error> {
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
    fn run_checked(&self, operands: &[(&str, TensorView<T>)]) -> Result<Tensor<T>, Error> {
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
            return self.run_parts_done(&all);
        }
        self.run_parts_done(operands)
    }

    /// [`Kernel::run`] once the parts' temporaries are among the operands.
    fn run_parts_done(&self, operands: &[(&str, TensorView<T>)]) -> Result<Tensor<T>, Error> {
        let with_views;
        let operands = if self.views.is_empty() {
            operands
        } else {
            let mut all = operands.to_vec();
            for (view, operand) in &self.views {
                if let Some((_, t)) = operands.iter().find(|(n, _)| n == operand) {
                    all.push((view.as_str(), t.clone()));
                }
            }
            with_views = all;
            with_views.as_slice()
        };
        if self.conversions.is_empty() {
            return self.run_in_place(operands);
        }
        let mut copies = Vec::new();
        for (name, format) in &self.conversions {
            let Some((_, t)) = operands.iter().find(|(n, _)| n == name) else { continue };
            let (shape, declared) = &self.declared[name];
            let declared = declared.clone().unwrap_or_else(|| Format::dense(shape.len().max(1)));
            nm_lower::lower::check_operand(name, shape, &declared, t.shape(), t.format())?;
            copies.push((name.as_str(), t.to_tensor().convert(format)?));
        }
        let args: Vec<(&str, TensorView<T>)> = operands
            .iter()
            .map(|(n, t)| (*n, copies.iter().find(|(c, _)| c == n).map_or_else(|| t.clone(), |(_, copy)| copy.view())))
            .collect();
        self.run_in_place(&args)
    }

    fn run_in_place(&self, operands: &[(&str, TensorView<T>)]) -> Result<Tensor<T>, Error> {
        let mut by_id: Vec<Option<&TensorView<T>>> = Vec::with_capacity(self.stmt.tensors.len());
        let mut named = Vec::with_capacity(operands.len());
        for (id, t) in self.stmt.tensors.iter() {
            if id == self.stmt.lhs.tensor {
                by_id.push(None);
                continue;
            }
            let tensor = operands
                .iter()
                .find(|(n, _)| *n == t.name)
                .map(|(_, x)| x)
                .ok_or_else(|| Error::Missing(format!("no tensor given for `{}`", t.name)))?;
            named.push((t.name.as_str(), tensor));
            by_id.push(Some(tensor));
        }
        let (narrow, wide) = match &self.engine {
            Engine::Generated { narrow, wide } => (narrow, wide),
            Engine::NmSpmm(route) => return self.run_nm_spmm(&named, route),
        };
        let widths = IndexWidths::of_views(&named);
        let specialized;
        let kernel = if widths == narrow.widths {
            narrow
        } else {
            specialized = self.specialization(wide, widths)?;
            &*specialized
        };
        let len: usize = self.result_shape.iter().product();
        let mut arrays = view_arguments(&kernel.lowered, &by_id, len)?;
        if let Ok(mut kept) = kernel.kept.try_lock() {
            for (k, w) in kept.drain(..) {
                arrays[k] = w;
            }
        }
        match &kernel.compiled {
            Some(k) => match &kernel.lowered.partition {
                Some(p) if self.threads > 1 => k.run_rows(&mut arrays, p, self.threads)?,
                _ => k.run_on(&mut arrays, self.threads)?,
            },
            None => interpret(&kernel.lowered.function, &mut arrays)?,
        }
        if let Ok(mut kept) = kernel.kept.try_lock() {
            use nm_lower::interp::ArrayData;
            for (k, a) in arrays.iter_mut().enumerate() {
                if matches!(a, ArrayData::Workspace(_))
                    && let ArrayData::Workspace(w) = std::mem::replace(a, ArrayData::I64(Vec::new()))
                {
                    kept.push((k, ArrayData::Workspace(w)));
                }
            }
        }
        let shape = if self.result_shape.is_empty() { vec![1] } else { self.result_shape.clone() };
        let format = self.result_format.clone().unwrap_or_else(|| Format::dense(shape.len()));
        Ok(take_result_tensor(&kernel.lowered, &mut arrays, &shape, &format)?)
    }

    /// `C = A·B` by nm-spmm, the operands checked against their declarations; the dense
    /// operand is read in place.
    fn run_nm_spmm(
        &self,
        named: &[(&str, &TensorView<T>)],
        route: &crate::commands::NmSpmm,
    ) -> Result<Tensor<T>, Error> {
        let (a, b) = (self.stmt.tensor_name(route.a), self.stmt.tensor_name(route.b));
        let operand = |name: &str| -> Result<&TensorView<T>, Error> {
            let t = named.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).expect("every operand is given");
            let (shape, format) = &self.shapes[name];
            let format = format.clone().unwrap_or_else(|| Format::dense(shape.len()));
            nm_lower::lower::check_operand(name, shape, &format, t.shape(), t.format())?;
            Ok(t)
        };
        Ok(crate::commands::multiply_nm(route, operand(a)?, operand(b)?, self.threads)?)
    }

    /// The kernel for operands with `widths`, lowered and compiled the first time.
    fn specialization(
        &self,
        wide: &Mutex<Vec<Arc<Specialization>>>,
        widths: IndexWidths,
    ) -> Result<Arc<Specialization>, Error> {
        let mut wide = wide.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = wide.iter().find(|s| s.widths == widths) {
            return Ok(s.clone());
        }
        let s = Arc::new(Specialization::new::<T>(&self.cin, &self.types, self.backend, widths, &self.options)?);
        wide.push(s.clone());
        Ok(s)
    }
}
