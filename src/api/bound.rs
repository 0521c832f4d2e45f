//! [`Bound`]: a kernel bound to its operands — checked, copied where the kernel reads a copy,
//! an N:M operand packed, the argument arrays built — once, then run as often as asked. What
//! [`Kernel::run`] does each call, a caller that runs the same operands many times (the
//! command's `-time=N`, a benchmark, an iterative solver) pays once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nm_format::{Format, Tensor, TensorView};
use nm_lower::args::ArrayData;
use nm_lower::interp::interpret;
use nm_lower::lower::{IndexWidths, check_operand, rearm, result_tensor, take_result_tensor, view_arguments};

use super::kernel::{Engine, Kernel, Specialization};
use super::nm_route::Packed;
use super::{Error, Scalar, nm_route};

/// A kernel and its operands, ready to run (see [`Kernel::bind`]).
pub struct Bound<'k, 'a, T: Scalar> {
    kernel: &'k Kernel<T>,
    /// What binding spent on the operands: copies in another format, packing.
    prepare_time: Duration,
    state: State<'a, T>,
}

/// Whether a computation is timed.
#[derive(Clone, Copy)]
enum Clock {
    On,
    Off,
}

/// What a bound kernel runs.
enum State<'a, T> {
    /// Generated code on argument arrays built once.
    Generated { specialization: Arc<Specialization>, arrays: Vec<ArrayData<'a>>, assembled: bool, computed: bool },
    /// nm-spmm's kernel on `B` packed once.
    NmSpmm(Box<NmRun<'a, T>>),
    /// A kernel with parts: the parts and the combined kernel run whole each time.
    Whole { operands: Vec<(String, TensorView<'a, T>)>, result: Option<Tensor<T>> },
}

/// The N:M SpMM's operands and its last result.
struct NmRun<'a, T> {
    a: TensorView<'a, T>,
    b: TensorView<'a, T>,
    packed: Packed<'a, T>,
    result: Option<Tensor<T>>,
}

impl<T: Scalar> Kernel<T> {
    /// Binds the operands (by name, each in its declared format, read in place) and hands the
    /// bound kernel to `f`, which runs it as often as it likes: the operands are checked, the
    /// copies of [`Kernel::conversions`] made and an N:M operand packed once, before `f`.
    /// The operands are checked as [`Kernel::run`] checks them.
    ///
    /// ```
    /// # use nmsparse::{Backend, Program};
    /// # use nmsparse::format::{Format, Tensor};
    /// let a = Tensor::<f64>::from_dense(&[2, 2], &[1.0, 0.0, 2.0, 3.0], &Format::csr())?;
    /// let x = Tensor::<f64>::from_dense(&[2], &[1.0, 1.0], &Format::dense(1))?;
    /// let kernel = Program::new("y(i) = A(i,j) * x(j)")?
    ///     .tensor("y", &[2], "dense")?
    ///     .tensor("A", &[2, 2], "csr")?
    ///     .tensor("x", &[2], "dense")?
    ///     .compile::<f64>(Backend::Interp)?;
    /// let y = kernel.bind(&[("A", a.view()), ("x", x.view())], |bound| {
    ///     for _ in 0..10 {
    ///         bound.compute()?;
    ///     }
    ///     bound.result()
    /// })?;
    /// assert_eq!(y.values(), &[1.0, 5.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bind<R>(
        &self,
        operands: &[(&str, TensorView<T>)],
        f: impl FnOnce(&mut Bound<'_, '_, T>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        self.check_operands(operands)?;
        if !self.parts.is_empty() {
            let operands = operands.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
            let state = State::Whole { operands, result: None };
            return f(&mut Bound { kernel: self, prepare_time: Duration::ZERO, state });
        }
        self.bind_parts_done(operands, f)
    }

    /// [`Kernel::bind`] once the parts' temporaries are among the checked operands: the views
    /// bound to their operands and the copies made.
    pub(super) fn bind_parts_done<R>(
        &self,
        operands: &[(&str, TensorView<T>)],
        f: impl FnOnce(&mut Bound<'_, '_, T>) -> Result<R, Error>,
    ) -> Result<R, Error> {
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
        // Timed only where there is something to prepare: a clock read is a good part of a
        // small kernel's call.
        let start = (!self.conversions.is_empty() || matches!(self.engine, Engine::NmSpmm(_))).then(Instant::now);
        let mut copies = Vec::new();
        for (name, format) in &self.conversions {
            let Some((_, t)) = operands.iter().find(|(n, _)| n == name) else { continue };
            let (shape, declared) = &self.declared[name];
            let declared = declared.clone().unwrap_or_else(|| Format::dense(shape.len().max(1)));
            check_operand(name, shape, &declared, t.shape(), t.format())?;
            copies.push((name.as_str(), t.to_tensor().convert(format)?));
        }
        let with_copies;
        let args = if copies.is_empty() {
            operands
        } else {
            with_copies = operands
                .iter()
                .map(|(n, t)| {
                    (*n, copies.iter().find(|(c, _)| c == n).map_or_else(|| t.clone(), |(_, copy)| copy.view()))
                })
                .collect::<Vec<_>>();
            with_copies.as_slice()
        };
        let mut bound = Bound::new(self, args, start)?;
        let outcome = f(&mut bound);
        bound.keep_workspaces();
        outcome
    }
}

impl<'k, 'a, T: Scalar> Bound<'k, 'a, T> {
    /// The state that runs `kernel` (without parts) on `operands`, copies made since `start`
    /// (`None`: nothing to prepare, not timed).
    fn new(
        kernel: &'k Kernel<T>,
        operands: &[(&str, TensorView<'a, T>)],
        start: Option<Instant>,
    ) -> Result<Self, Error> {
        let stmt = &kernel.stmt;
        let mut by_id: Vec<Option<&TensorView<'a, T>>> = Vec::with_capacity(stmt.tensors.len());
        let mut named = Vec::with_capacity(operands.len());
        for (id, t) in stmt.tensors.iter() {
            if id == stmt.lhs.tensor {
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
        let state = match &kernel.engine {
            Engine::NmSpmm(route) => {
                let operand = |name: &str| -> Result<TensorView<'a, T>, Error> {
                    let t = named.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).expect("every operand is given");
                    let (shape, format) = &kernel.shapes[name];
                    let format = format.clone().unwrap_or_else(|| Format::dense(shape.len()));
                    check_operand(name, shape, &format, t.shape(), t.format())?;
                    Ok(t.clone())
                };
                let (a, b) = (operand(stmt.tensor_name(route.a))?, operand(stmt.tensor_name(route.b))?);
                let packed = nm_route::pack(route, &b)?;
                State::NmSpmm(Box::new(NmRun { a, b, packed, result: None }))
            }
            Engine::Generated { .. } => {
                let specialization = kernel.specialization(IndexWidths::of_views(&named))?;
                let shape = &kernel.result_shape;
                let len = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| {
                    nm_format::TensorError::TooLarge { what: format!("the result's shape {shape:?}") }
                })?;
                let mut arrays = view_arguments(&specialization.lowered, &by_id, len)?;
                if let Ok(mut kept) = specialization.kept.try_lock() {
                    for (k, w) in kept.drain(..) {
                        arrays[k] = w;
                    }
                }
                State::Generated { specialization, arrays, assembled: false, computed: false }
            }
        };
        Ok(Bound { kernel, prepare_time: start.map_or(Duration::ZERO, |s| s.elapsed()), state })
    }

    /// What binding spent on the operands: making the copies of [`Kernel::conversions`], or
    /// packing the N:M operand of nm-spmm's kernel.
    pub fn prepare_time(&self) -> Duration {
        self.prepare_time
    }

    /// Runs the assembly kernel — the result's structure — if the kernel has one
    /// ([`Program::separate_assembly`](super::Program::separate_assembly)) and it has not run
    /// yet; its time, or `None` when there is none to run.
    pub fn assemble(&mut self) -> Result<Option<Duration>, Error> {
        let threads = self.kernel.threads;
        let State::Generated { specialization, arrays, assembled, .. } = &mut self.state else { return Ok(None) };
        if specialization.halves.is_none() || *assembled {
            return Ok(None);
        }
        let start = Instant::now();
        run_function(specialization, 0, arrays, threads)?;
        *assembled = true;
        Ok(Some(start.elapsed()))
    }

    /// Runs the kernel once (after the assembly kernel, run first if it has not run) and
    /// returns its time. Each run computes the result anew from the operands.
    pub fn compute(&mut self) -> Result<Duration, Error> {
        self.compute_with(Clock::On).map(|time| time.unwrap_or_default())
    }

    /// [`Bound::compute`], timing only the kernel and only when asked (a clock read is a
    /// good part of a small kernel's call).
    fn compute_with(&mut self, clock: Clock) -> Result<Option<Duration>, Error> {
        self.assemble()?;
        // A fused kernel appends to a sparse result: it starts again from empty outputs
        // (untimed, as taco times only the kernel). A dense result is zeroed by its kernel,
        // and a compute kernel writes into the structure assembly made.
        if let State::Generated { specialization, arrays, computed: true, .. } = &mut self.state
            && specialization.halves.is_none()
            && specialization.lowered.sparse_result()
        {
            rearm(&specialization.lowered, arrays);
        }
        let threads = self.kernel.threads;
        let start = match clock {
            Clock::On => Some(Instant::now()),
            Clock::Off => None,
        };
        match &mut self.state {
            State::Generated { specialization, arrays, computed, .. } => {
                run_function(specialization, specialization.compute_index(), arrays, threads)?;
                *computed = true;
            }
            State::NmSpmm(run) => run.result = Some(nm_route::multiply(&run.packed, &run.a, &run.b, threads)?),
            State::Whole { operands, result } => {
                let views: Vec<(&str, TensorView<T>)> = operands.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
                *result = Some(self.kernel.run_checked(&views)?);
            }
        }
        Ok(start.map(|s| s.elapsed()))
    }

    /// The result of the last [`Bound::compute`] (which runs first if it has not run).
    pub fn result(&mut self) -> Result<Tensor<T>, Error> {
        if !self.computed() {
            self.compute()?;
        }
        let (shape, format) = self.result_shape_and_format();
        match &self.state {
            State::Generated { specialization, arrays, .. } => {
                Ok(result_tensor(&specialization.lowered, arrays, &shape, &format)?)
            }
            State::NmSpmm(run) => Ok(run.result.clone().expect("computed")),
            State::Whole { result, .. } => Ok(result.clone().expect("computed")),
        }
    }

    /// Computes once and takes the result out (what [`Kernel::run`] returns).
    pub(super) fn run_once(&mut self) -> Result<Tensor<T>, Error> {
        self.compute_with(Clock::Off)?;
        let (shape, format) = self.result_shape_and_format();
        match &mut self.state {
            State::Generated { specialization, arrays, .. } => {
                Ok(take_result_tensor(&specialization.lowered, arrays, &shape, &format)?)
            }
            State::NmSpmm(run) => Ok(run.result.take().expect("computed")),
            State::Whole { result, .. } => Ok(result.take().expect("computed")),
        }
    }

    fn computed(&self) -> bool {
        match &self.state {
            State::Generated { computed, .. } => *computed,
            State::NmSpmm(run) => run.result.is_some(),
            State::Whole { result, .. } => result.is_some(),
        }
    }

    /// The result's shape (a scalar is held as one element) and format.
    fn result_shape_and_format(&self) -> (Vec<usize>, Format) {
        let shape = &self.kernel.result_shape;
        let shape = if shape.is_empty() { vec![1] } else { shape.clone() };
        let format = self.kernel.result_format.clone().unwrap_or_else(|| Format::dense(shape.len()));
        (shape, format)
    }

    /// Hands the sparse workspaces back to the kernel, emptied by their `finish` and with
    /// their memory, for its next run.
    fn keep_workspaces(&mut self) {
        let State::Generated { specialization, arrays, .. } = &mut self.state else { return };
        if let Ok(mut kept) = specialization.kept.try_lock() {
            for (k, a) in arrays.iter_mut().enumerate() {
                if matches!(a, ArrayData::Workspace(_))
                    && let ArrayData::Workspace(w) = std::mem::replace(a, ArrayData::I64(Vec::new()))
                {
                    kept.push((k, ArrayData::Workspace(w)));
                }
            }
        }
    }
}

/// Runs function `index` of [`Specialization::functions`] on `arrays`: compiled C on
/// `threads` threads (row ranges where the lowering partitioned the outer loop), or the
/// interpreter.
fn run_function(s: &Specialization, index: usize, arrays: &mut [ArrayData], threads: usize) -> Result<(), Error> {
    match s.compiled.get(index) {
        Some(k) => match &s.lowered.partition {
            Some(p) if threads > 1 => k.run_rows(arrays, p, threads)?,
            _ => k.run_on(arrays, threads)?,
        },
        None => interpret(s.functions()[index], arrays)?,
    }
    Ok(())
}
