//! [`Program`]: an expression and its declarations, and the ladder that compiles it into a
//! [`Kernel`] — the statement as declared, then through copies, views, a split into kernels,
//! and last a loop that visits every coordinate.

use std::collections::HashMap;
use std::sync::Arc;

use nm_format::{Format, TensorView};
use nm_ir::concrete::{Command, ConcreteNotation, concretize_for, parse_schedule};
use nm_ir::notation::{Declarations, IndexNotation, ParseError, TensorType, Types, parse};
use nm_ir::plan::{Plan, PlanOptions};
use nm_lower::ir::OmpSchedule;
use nm_lower::lower::{IndexWidths, LowerError, LowerOptions};

use super::kernel::{CodeOptions, Engine, Kernel, Specialization};
use super::{Backend, Error, Scalar, nm_route};

/// An expression and the declarations of its tensors.
#[derive(Clone, Debug)]
pub struct Program {
    pub(super) stmt: IndexNotation,
    decls: Declarations,
    pub(super) shapes: HashMap<String, (Vec<usize>, Option<Format>)>,
    /// The schedule's text and its commands, parsed once when given; a parse error is the
    /// error of every later stage.
    schedule: Option<(String, Result<Vec<Command>, ParseError>)>,
    pub(super) options: LowerOptions,
    pub(super) code: CodeOptions,
    /// The operands' index widths the first kernel is made for.
    widths: IndexWidths,
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
            code: CodeOptions::default(),
            widths: IndexWidths::default(),
        })
    }

    /// Declares tensor `name` with `shape` stored in `format` (`"dense"`, `"csr"`, `"ds:1,0"`,
    /// `"nm(2,4,16)"`, ...).
    pub fn tensor(self, name: &str, shape: &[usize], format: &str) -> Result<Program, Error> {
        let f = Format::parse(format, shape.len().max(1))?;
        Ok(self.declare(name, shape, f))
    }

    /// Declares tensor `name` with `shape` in the parsed format `f` (dense, or a scalar, is
    /// declared dense).
    pub fn declare(mut self, name: &str, shape: &[usize], f: Format) -> Program {
        let dense = f == Format::dense(f.order());
        let ty =
            if dense || shape.is_empty() { TensorType::dense(shape) } else { TensorType::sparse(shape, f.clone()) };
        self.decls = self.decls.tensor(name, ty);
        self.shapes.insert(name.to_string(), (shape.to_vec(), (!dense).then_some(f)));
        self
    }

    /// Gives an index variable a size (needed when only compound subscripts use it).
    pub fn index_size(self, var: &str, size: usize) -> Program {
        self.index_size_from(var, size, "its declaration")
    }

    /// [`Program::index_size`], saying where the size came from (`-d=i:100`) in the message
    /// of a conflict.
    pub fn index_size_from(mut self, var: &str, size: usize, origin: &str) -> Program {
        self.decls = self.decls.index_size_from(var, size, origin);
        self
    }

    /// Sets the schedule (`"reorder(k, j); parallelize(i, cpu_thread, no_races)"`); a
    /// schedule that does not parse is the error of [`Program::concrete`] and
    /// [`Program::compile`].
    pub fn schedule(mut self, schedule: &str) -> Program {
        self.schedule = Some((schedule.to_string(), parse_schedule(schedule)));
        self
    }

    /// The workspace of a statement that scatters into a sparse result (see [`crate::ism`]);
    /// by default the analysis picks one.
    pub fn workspace(mut self, config: crate::ism::Config) -> Program {
        self.options.workspace = Some(config);
        self
    }

    /// Compiles a kernel with a sparse result as two, taco's default: an assembly kernel that
    /// computes the result's structure, run once per [`Kernel::bind`], and a compute kernel
    /// that fills its values, run at each [`Bound::compute`](super::Bound::compute). Off by
    /// default (one kernel does both).
    pub fn separate_assembly(mut self, separate: bool) -> Program {
        self.code.separate_assembly = separate;
        self
    }

    /// A prefix of the generated functions' names (taco's `-prefix`).
    pub fn function_prefix(mut self, prefix: &str) -> Program {
        self.code.prefix = prefix.to_string();
        self
    }

    /// How OpenMP hands out the iterations of the loops a schedule parallelizes.
    pub fn omp_schedule(mut self, schedule: OmpSchedule) -> Program {
        self.code.omp_schedule = Some(schedule);
        self
    }

    /// The statement.
    pub fn statement(&self) -> &IndexNotation {
        &self.stmt
    }

    /// Checks, concretizes and schedules: the CIN a kernel is lowered from, and the types.
    pub fn concrete(&self) -> Result<(ConcreteNotation, Types), Error> {
        let types = self.stmt.check(&self.decls)?;
        let mut cin = concretize_for(&self.stmt, &types, &nm_lower::lower::LOOP_ORDER);
        // Each scheduling command checks what it hands on; concretize's output is checked
        // here, so that no inconsistent notation reaches the lowering.
        cin.verify().map_err(|e| nm_ir::concrete::ScheduleError::Inconsistent(format!("after concretize: {e}")))?;
        if let Some(commands) = self.schedule_commands()? {
            cin = cin.schedule_sized(commands, &types.sizes)?;
            cin.check_bounds(&types.sizes)?;
        }
        Ok((cin, types))
    }

    /// Plans the scheduled statement `cin` (of `types`): what the lowering of every index-width
    /// specialization takes.
    fn plan(&self, cin: &ConcreteNotation, types: &Types) -> Result<Plan, Error> {
        let options = PlanOptions { workspace: self.options.workspace };
        Plan::new(cin, types, &options).map_err(|e| Error::Lower(LowerError::from(e)))
    }

    /// What the schedule's commands that change nothing here say
    /// ([`nm_ir::concrete::Command::note`]).
    pub fn schedule_notes(&self) -> Result<Vec<String>, Error> {
        Ok(self.schedule_commands()?.into_iter().flatten().filter_map(Command::note).collect())
    }

    fn schedule_commands(&self) -> Result<Option<&[Command]>, Error> {
        match &self.schedule {
            None => Ok(None),
            Some((_, Ok(commands))) => Ok(Some(commands)),
            Some((_, Err(e))) => Err(e.clone().into()),
        }
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
    ///
    /// The process keeps the kernels it compiled: compiling an equal program again (the same
    /// statement, declarations, schedule, options, back end, value type and compiler
    /// settings) returns a clone of its kernel, which shares the compiled code.
    pub fn compile<T: Scalar>(&self, backend: Backend) -> Result<Kernel<T>, Error> {
        self.decls.check_names(&self.stmt)?;
        let key = self.memo_key::<T>(backend);
        if let Some(kernel) = super::memo::find::<T>(&key) {
            return Ok(kernel);
        }
        let kernel = self.compile_any::<T>(backend)?;
        super::memo::keep(key, &kernel);
        Ok(kernel)
    }

    /// Everything a kernel compiled from this program depends on, printed: the statement, the
    /// declarations, the schedule, the options, the index widths, the back end and value type,
    /// and for generated C the compiler's settings and cache directory.
    fn memo_key<T: Scalar>(&self, backend: Backend) -> String {
        let mut shapes: Vec<_> = self.shapes.iter().collect();
        shapes.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let compiler = match backend {
            Backend::Jit => {
                let var = |name| std::env::var(name).unwrap_or_default();
                format!("{} {} {}", var("CC"), var("NMSPARSE_CFLAGS"), nm_lower::jit::cache_dir().display())
            }
            Backend::Interp => String::new(),
        };
        format!(
            "{:?}\n{:?}\n{shapes:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{backend:?} {} {compiler}",
            self.stmt,
            self.decls,
            self.schedule,
            self.options,
            self.code,
            self.widths,
            std::any::type_name::<T>()
        )
    }

    /// [`Program::compile`] for the index widths `operands` are stored in (the command's
    /// operands, which may need 64-bit indices), so that binding them compiles nothing more.
    pub fn compile_for<T: Scalar>(
        &self,
        backend: Backend,
        operands: &[(&str, TensorView<T>)],
    ) -> Result<Kernel<T>, Error> {
        let named: Vec<(&str, &TensorView<T>)> = operands.iter().map(|(n, t)| (*n, t)).collect();
        Program { widths: IndexWidths::of_views(&named), ..self.clone() }.compile(backend)
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
        if let Some(kernel) = self.compile_with_views::<T>(backend)? {
            return Ok(kernel);
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

    /// A sparse operand read in two orders (`B(i,j) + B(j,i)`): its other reads get a view of
    /// their own, which can be read through a copy in another order. `None` when there is no
    /// such read or it does not lower either.
    fn compile_with_views<T: Scalar>(&self, backend: Backend) -> Result<Option<Kernel<T>>, Error> {
        let sparse = |name: &str| self.shapes.get(name).is_some_and(|(_, f)| f.is_some());
        let Some((stmt, views)) = self.stmt.with_views(sparse) else { return Ok(None) };
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
        Ok(kernel.map(|mut kernel| {
            kernel.views = views;
            kernel
        }))
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
    /// A candidate the schedule or the type check refuses is passed over like one that does
    /// not lower: the statement as declared was scheduled and checked, and the copies are the
    /// driver's choice, not the user's.
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
                Err(Error::Lower(_) | Error::Schedule(_) | Error::Semantic(_)) => continue,
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
        let engine = match nm_route::recognise(&self.stmt, format_of) {
            Some(route) => Engine::NmSpmm(route),
            None => Engine::generated(Specialization::new::<T>(
                Arc::new(self.plan(&cin, &types)?),
                backend,
                self.widths.clone(),
                &self.options,
                &self.code,
                None,
            )?),
        };
        Ok(Kernel::new(self, backend, engine, shape, format, self.schedule_notes()?))
    }
}
