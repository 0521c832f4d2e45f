//! Each command as a rewrite of CIN, checked for legality first: a refusal says why.

use super::{BoundType, Command, Derivation, LoopAttrs, OutputRace, ParallelUnit};
use crate::concrete::{ConcreteNotation, Stmt, StmtId};
use crate::id::Id;
use crate::notation::{AssignOp, IndexVar, IndexVarId, TensorId};

/// A command that cannot apply, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// No loop over the named variable.
    #[error("{command}: there is no loop over `{var}` in {cin}")]
    NoSuchLoop {
        /// The command.
        command: &'static str,
        /// The variable.
        var: String,
        /// The statement, printed.
        cin: String,
    },
    /// A new variable name that is already taken.
    #[error("{command}: the name `{name}` is already used; pick a new name for the derived variable")]
    NameInUse {
        /// The command.
        command: &'static str,
        /// The name.
        name: String,
    },
    /// A loop named twice in one command.
    #[error("{command}: `{name}` is named twice")]
    NamedTwice {
        /// The command.
        command: &'static str,
        /// The name.
        name: String,
    },
    /// Loops that must be directly nested but are not.
    #[error("{command}: the loops over {vars} are not directly nested ({why})")]
    NotNested {
        /// The command.
        command: &'static str,
        /// The loops, named.
        vars: String,
        /// What stands between them.
        why: String,
    },
    /// A factor that must be at least 1.
    #[error("{command}: the factor must be at least 1")]
    ZeroFactor {
        /// The command.
        command: &'static str,
    },
    /// A command that needs a loop's extent where the sizes are not given (or the loop runs
    /// over positions).
    #[error(
        "{command}: the extent of `{var}` is not known here (the schedule is applied without sizes, or `{var}` runs over positions)"
    )]
    UnknownExtent {
        /// The command.
        command: &'static str,
        /// The variable.
        var: String,
    },
    /// `assemble` of a tensor the statement does not write.
    #[error("assemble: `{tensor}` is not a result of the statement (it writes `{results}`)")]
    NotAResult {
        /// The tensor named.
        tensor: String,
        /// The results, joined.
        results: String,
    },
    /// `parallelize` on a GPU unit: the kernels generated for expressions are C for the CPU.
    #[error(
        "parallelize({var}, {unit}, ...): GPU units need CUDA code, which is generated only for the N:M product; expressions compile to C for the CPU (use CPUThread or CPUVector)"
    )]
    GpuUnit {
        /// The variable.
        var: String,
        /// The unit, named.
        unit: &'static str,
    },
    /// `pos` on a tensor the loop body does not read with the variable as a plain subscript.
    #[error(
        "pos: no access to `{tensor}` read below the loop over `{var}` has `{var}` (or what it was fused from) as plain subscripts, so there are no positions to iterate (pos iterates over the stored entries of a tensor the loop reads)"
    )]
    NoPositions {
        /// The variable.
        var: String,
        /// The tensor.
        tensor: String,
    },
    /// `parallelize` with `no_races` on a loop whose iterations write the same elements.
    #[error(
        "parallelize: iterations of `{var}` write the same elements of {tensor} ({why}), so no_races does not hold"
    )]
    Races {
        /// The variable.
        var: String,
        /// The written tensor, quoted and described.
        tensor: String,
        /// The variable, or the one it was derived from, that does not index the tensor.
        why: String,
    },
    /// `precompute` of an expression the statement does not contain.
    #[error("precompute: `{expr}` is not a subexpression of {cin}")]
    NoSuchExpr {
        /// The expression.
        expr: String,
        /// The statement.
        cin: String,
    },
    /// `precompute` where the temporary would need more than the precomputed variable.
    #[error("precompute: {why}")]
    CannotPrecompute {
        /// Why.
        why: String,
    },
    /// A `bound` whose promise the sizes break.
    #[error("bound({var}, {bound}, {value}, {kind}): the extent of `{var}` is {extent}, so the bound does not hold")]
    BoundBroken {
        /// The bounded variable.
        var: String,
        /// The variable `bound` made.
        bound: String,
        /// The bound.
        value: u64,
        /// The bound's kind, as written.
        kind: &'static str,
        /// How many coordinates the variable runs over.
        extent: u64,
    },
    /// `parallelize` inside or around another parallel loop.
    #[error("parallelize: `{var}` is {relation} the parallel loop over `{other}`; nested parallelism is not supported")]
    NestedParallel {
        /// The variable.
        var: String,
        /// Inside / around.
        relation: &'static str,
        /// The other loop.
        other: String,
    },
    /// A rewrite broke CIN's rules: a bug in the scheduler, reported instead of lowered.
    #[error("internal error, please report it: the schedule made inconsistent notation {0}")]
    Inconsistent(String),
}

impl ConcreteNotation {
    /// Checks what each `bound` promises against `sizes` (indexed by variable, as
    /// [`crate::notation::Types::sizes`]): a schedule is applied before sizes need be known,
    /// and a broken promise must be an error, not a kernel that reads past an array. Bounds
    /// on `pos` variables are not checked (their count is the stored entries'); the loops
    /// run over the real coordinates either way.
    pub fn check_bounds(&self, sizes: &[usize]) -> Result<(), ScheduleError> {
        for (_, stmt) in self.stmts.iter() {
            let Stmt::Forall { var: b, attrs: LoopAttrs { bound: Some((value, kind)), .. }, .. } = *stmt else {
                continue;
            };
            // `bound(i, ib, ...)` renamed the loop; `bound(i, ...)` kept it.
            let parent = match self.derivations.get(&b) {
                Some(&Derivation::Bound { parent, .. }) => parent,
                _ => b,
            };
            let Some(extent) = self.extent(parent, sizes) else { continue };
            let holds = match kind {
                BoundType::MinExact | BoundType::MaxExact => extent == value,
                BoundType::MinConstraint => extent >= value,
                BoundType::MaxConstraint => extent <= value,
            };
            if !holds {
                return Err(ScheduleError::BoundBroken {
                    var: self.vars[parent].name.clone(),
                    bound: self.vars[b].name.clone(),
                    value,
                    kind: kind.name(),
                    extent,
                });
            }
        }
        Ok(())
    }

    /// The statement with every loop over a `bound` variable back over the variable it bounds
    /// (and what was derived from it, from that variable): once [`Self::check_bounds`] has
    /// held, a bound says nothing the sizes do not, so this is what a back end runs.
    pub fn without_bounds(&self) -> ConcreteNotation {
        let mut c = self.clone();
        let bounded = |mut v: IndexVarId| {
            while let Some(Derivation::Bound { parent, .. }) = self.derivations.get(&v) {
                v = *parent;
            }
            v
        };
        let ids: Vec<StmtId> = c.stmts.iter().map(|(id, _)| id).collect();
        for id in ids {
            if let Stmt::Forall { var, attrs, .. } = &mut c.stmts[id] {
                *var = bounded(*var);
                attrs.bound = None;
            }
        }
        c.derivations.retain(|_, d| !matches!(d, Derivation::Bound { .. }));
        for d in c.derivations.values_mut() {
            match d {
                Derivation::Split { parent, .. } | Derivation::Pos { parent, .. } => *parent = bounded(*parent),
                Derivation::Fuse { outer, inner } => (*outer, *inner) = (bounded(*outer), bounded(*inner)),
                Derivation::Bound { .. } => unreachable!("removed above"),
            }
        }
        c
    }

    /// How many coordinates `v` runs over, where the sizes say (not for `pos` variables).
    fn extent(&self, v: IndexVarId, sizes: &[usize]) -> Option<u64> {
        match self.derivations.get(&v) {
            None => sizes.get(v.index()).map(|&n| n as u64),
            Some(&Derivation::Split { parent, outer: true, factor }) => {
                Some(self.extent(parent, sizes)?.div_ceil(factor))
            }
            Some(&Derivation::Split { parent, outer: false, factor }) => Some(factor.min(self.extent(parent, sizes)?)),
            Some(&Derivation::Fuse { outer, inner }) => {
                self.extent(outer, sizes)?.checked_mul(self.extent(inner, sizes)?)
            }
            Some(Derivation::Pos { .. }) => None,
            Some(&Derivation::Bound { parent, .. }) => self.extent(parent, sizes),
        }
    }

    /// Applies a schedule's commands in order (`divide` needs sizes: see
    /// [`Self::schedule_sized`]).
    pub fn schedule(&self, commands: &[Command]) -> Result<ConcreteNotation, ScheduleError> {
        self.schedule_sized(commands, &[])
    }

    /// Applies a schedule's commands in order, with the variables' sizes (indexed by variable,
    /// as [`crate::notation::Types::sizes`]) for `divide`.
    pub fn schedule_sized(&self, commands: &[Command], sizes: &[usize]) -> Result<ConcreteNotation, ScheduleError> {
        commands.iter().try_fold(self.clone(), |cin, c| cin.apply_sized(c, sizes))
    }

    /// Applies one command, or explains why it is illegal.
    pub fn apply(&self, command: &Command) -> Result<ConcreteNotation, ScheduleError> {
        self.apply_sized(command, &[])
    }

    /// Applies one command with the variables' sizes, or explains why it is illegal. What it
    /// hands on passes [`ConcreteNotation::verify`]: a rewrite that broke CIN's rules is a bug,
    /// reported instead of lowered.
    pub fn apply_sized(&self, command: &Command, sizes: &[usize]) -> Result<ConcreteNotation, ScheduleError> {
        let c = self.rewrite(command, sizes)?;
        c.verify().map_err(|e| ScheduleError::Inconsistent(format!("after {command:?}: {e}")))?;
        Ok(c)
    }

    /// [`ConcreteNotation::apply_sized`] before the check.
    fn rewrite(&self, command: &Command, sizes: &[usize]) -> Result<ConcreteNotation, ScheduleError> {
        let mut c = self.clone();
        match command {
            Command::Divide(i, i0, i1, parts) => {
                if *parts == 0 {
                    return Err(ScheduleError::ZeroFactor { command: "divide" });
                }
                let (_, var) = c.loop_named("divide", i)?;
                let Some(extent) = c.extent(var, sizes) else {
                    return Err(ScheduleError::UnknownExtent { command: "divide", var: i.clone() });
                };
                let factor = extent.div_ceil(*parts).max(1);
                return c.apply_sized(&Command::Split(i.clone(), i0.clone(), i1.clone(), factor), sizes);
            }
            Command::NotParallel(i) => {
                let (s, _) = c.loop_named("parallelize", i)?;
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.parallel = None;
                }
            }
            Command::MergeBy(i, _) => {
                c.loop_named("mergeby", i)?;
            }
            Command::Assemble(t, _) => {
                // The statement's results: what an assignment writes, temporaries aside.
                let results: Vec<String> = c
                    .assignments(c.root)
                    .iter()
                    .filter_map(|&a| match &c.stmts[a] {
                        Stmt::Assign { lhs, .. } if !c.temporaries.contains(&lhs.tensor) => {
                            Some(c.tensors[lhs.tensor].name.clone())
                        }
                        _ => None,
                    })
                    .collect();
                if !results.contains(t) {
                    return Err(ScheduleError::NotAResult { tensor: t.clone(), results: results.join("`, `") });
                }
            }
            Command::Reorder(vars) => c.reorder(vars)?,
            Command::Split(i, i0, i1, factor) => {
                if *factor == 0 {
                    return Err(ScheduleError::ZeroFactor { command: "split" });
                }
                let (s, var) = c.loop_named("split", i)?;
                let outer = c.fresh_var("split", i0)?;
                let inner = c.fresh_var("split", i1)?;
                let Stmt::Forall { body, attrs, .. } = c.stmts[s].clone() else { unreachable!() };
                let inner_loop = c.stmts.push(Stmt::Forall { var: inner, body, attrs: LoopAttrs::default() });
                c.stmts[s] = Stmt::Forall { var: outer, body: inner_loop, attrs };
                c.derivations.insert(outer, Derivation::Split { parent: var, outer: true, factor: *factor });
                c.derivations.insert(inner, Derivation::Split { parent: var, outer: false, factor: *factor });
            }
            Command::Fuse(i, j, f) => {
                let (s, outer) = c.loop_named("fuse", i)?;
                let Stmt::Forall { body, attrs, .. } = c.stmts[s].clone() else { unreachable!() };
                let inner = c.var_named("fuse", j)?;
                let Stmt::Forall { var, body: inner_body, .. } = c.stmts[body].clone() else {
                    return Err(c.not_nested("fuse", &[i, j], body));
                };
                if var != inner {
                    return Err(c.not_nested("fuse", &[i, j], body));
                }
                let fused = c.fresh_var("fuse", f)?;
                c.stmts[s] = Stmt::Forall { var: fused, body: inner_body, attrs };
                c.derivations.insert(fused, Derivation::Fuse { outer, inner });
            }
            Command::Pos(i, ip, tensor) => {
                let (s, var) = c.loop_named("pos", i)?;
                let Stmt::Forall { body, .. } = c.stmts[s] else { unreachable!() };
                let t = c.tensors.iter().find(|(_, t)| &t.name == tensor).map(|(id, _)| id);
                let read = t.is_some_and(|t| c.reads_with(body, t, var));
                let Some(t) = t.filter(|_| read) else {
                    return Err(ScheduleError::NoPositions { var: i.clone(), tensor: tensor.clone() });
                };
                let p = c.fresh_var("pos", ip)?;
                c.rename_loop(s, p);
                c.derivations.insert(p, Derivation::Pos { parent: var, tensor: t });
            }
            Command::Bound(i, ib, value, kind) => {
                let (s, var) = c.loop_named("bound", i)?;
                // The same name for the bounded variable keeps the loop's variable.
                if ib != i {
                    let b = c.fresh_var("bound", ib)?;
                    c.rename_loop(s, b);
                    c.derivations.insert(b, Derivation::Bound { parent: var, value: *value, kind: *kind });
                }
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.bound = Some((*value, *kind));
                }
            }
            Command::Unroll(i, factor) => {
                if *factor == 0 {
                    return Err(ScheduleError::ZeroFactor { command: "unroll" });
                }
                let (s, _) = c.loop_named("unroll", i)?;
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.unroll = Some(*factor as u32);
                }
            }
            Command::Precompute(expr, i, iw, w, policy) => {
                let ([i], [iw]) = (i.as_slice(), iw.as_slice()) else {
                    return Err(ScheduleError::CannotPrecompute {
                        why: format!(
                            "over several variables ({{{}}}): a workspace here has one dimension; precompute over one variable",
                            i.join(",")
                        ),
                    });
                };
                c.precompute(expr, i, iw, w.as_deref(), *policy)?
            }
            Command::Parallelize(i, unit, race) => {
                if matches!(unit, ParallelUnit::GpuBlock | ParallelUnit::GpuWarp | ParallelUnit::GpuThread) {
                    return Err(ScheduleError::GpuUnit { var: i.clone(), unit: unit.name() });
                }
                let (s, var) = c.loop_named("parallelize", i)?;
                c.check_parallel(s, var, *race)?;
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.parallel = Some((*unit, *race));
                }
            }
        }
        Ok(c)
    }

    /// The unscheduled variables a (possibly derived) variable stands for, outermost first.
    pub fn origins(&self, v: IndexVarId) -> Vec<IndexVarId> {
        match self.derivations.get(&v) {
            None => vec![v],
            Some(
                Derivation::Split { parent, .. } | Derivation::Pos { parent, .. } | Derivation::Bound { parent, .. },
            ) => self.origins(*parent),
            Some(Derivation::Fuse { outer, inner }) => [self.origins(*outer), self.origins(*inner)].concat(),
        }
    }

    /// The loop order with every derived variable traced back to the variables it came from:
    /// the order the statement had before split, fuse, pos and bound.
    pub fn unscheduled_loop_order(&self) -> Vec<IndexVarId> {
        let mut out = Vec::new();
        for v in self.loop_order().into_iter().flat_map(|v| self.origins(v)) {
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }

    /// The derivations as text, one line per derived variable: `i0 = split(i, 32).outer`.
    pub fn provenance(&self) -> String {
        let name = |v: &IndexVarId| self.vars[*v].name.as_str();
        self.derivations
            .iter()
            .map(|(v, d)| {
                let what = match d {
                    Derivation::Split { parent, outer, factor } => {
                        format!("split({}, {factor}).{}", name(parent), if *outer { "outer" } else { "inner" })
                    }
                    Derivation::Fuse { outer, inner } => format!("fuse({}, {})", name(outer), name(inner)),
                    Derivation::Pos { parent, tensor } => {
                        format!("pos({}, {})", name(parent), self.tensors[*tensor].name)
                    }
                    Derivation::Bound { parent, value, kind } => {
                        format!("bound({}, {value}, {})", name(parent), kind.name())
                    }
                };
                format!("{} = {what}\n", name(v))
            })
            .collect()
    }

    fn var_named(&self, command: &'static str, name: &str) -> Result<IndexVarId, ScheduleError> {
        self.vars.iter().find(|(_, v)| v.name == name).map(|(id, _)| id).ok_or_else(|| ScheduleError::NoSuchLoop {
            command,
            var: name.to_string(),
            cin: self.to_string(),
        })
    }

    /// The loop over `name`.
    pub(crate) fn loop_named(&self, command: &'static str, name: &str) -> Result<(StmtId, IndexVarId), ScheduleError> {
        let var = self.var_named(command, name)?;
        self.stmts
            .iter()
            .find(|(id, s)| matches!(s, Stmt::Forall { var: v, .. } if *v == var) && self.reachable(*id))
            .map(|(id, _)| (id, var))
            .ok_or_else(|| ScheduleError::NoSuchLoop { command, var: name.to_string(), cin: self.to_string() })
    }

    fn reachable(&self, target: StmtId) -> bool {
        let mut stack = vec![self.root];
        while let Some(s) = stack.pop() {
            if s == target {
                return true;
            }
            stack.extend(self.child_stmts(s));
        }
        false
    }

    fn child_stmts(&self, s: StmtId) -> Vec<StmtId> {
        match &self.stmts[s] {
            Stmt::Assign { .. } => vec![],
            Stmt::Forall { body, .. } => vec![*body],
            Stmt::Where { consumer, producer } => vec![*consumer, *producer],
            Stmt::Sequence { first, second } => vec![*first, *second],
        }
    }

    pub(crate) fn fresh_var(&mut self, command: &'static str, name: &str) -> Result<IndexVarId, ScheduleError> {
        if self.vars.iter().any(|(_, v)| v.name == name) || self.tensors.iter().any(|(_, t)| t.name == name) {
            return Err(ScheduleError::NameInUse { command, name: name.to_string() });
        }
        Ok(self.vars.push(IndexVar { name: name.to_string() }))
    }

    fn rename_loop(&mut self, s: StmtId, to: IndexVarId) {
        if let Stmt::Forall { var, .. } = &mut self.stmts[s] {
            *var = to;
        }
    }

    fn not_nested(&self, command: &'static str, vars: &[&String], at: StmtId) -> ScheduleError {
        let names: Vec<String> = vars.iter().map(|v| format!("`{v}`")).collect();
        let why = match &self.stmts[at] {
            Stmt::Forall { var, .. } => format!("the loop over `{}` stands between them", self.vars[*var].name),
            Stmt::Where { .. } => "a `where` stands between them".to_string(),
            Stmt::Sequence { .. } => "a `sequence` stands between them".to_string(),
            Stmt::Assign { .. } => "the inner one is not inside the outer one".to_string(),
        };
        ScheduleError::NotNested { command, vars: names.join(" and "), why }
    }

    fn reorder(&mut self, names: &[String]) -> Result<(), ScheduleError> {
        let vars: Vec<IndexVarId> = names.iter().map(|n| self.var_named("reorder", n)).collect::<Result<_, _>>()?;
        if let Some(dup) = vars.iter().position(|v| vars.iter().filter(|w| *w == v).count() > 1) {
            return Err(ScheduleError::NamedTwice { command: "reorder", name: names[dup].clone() });
        }
        // The outermost loop over any of them starts the nest.
        let (start, _) = self
            .stmts
            .iter()
            .filter(|(id, s)| matches!(s, Stmt::Forall { var, .. } if vars.contains(var)) && self.reachable(*id))
            .map(|(id, _)| (id, self.depth(id)))
            .min_by_key(|&(_, d)| d)
            .ok_or_else(|| ScheduleError::NoSuchLoop {
                command: "reorder",
                var: names[0].clone(),
                cin: self.to_string(),
            })?;
        let mut chain = vec![start];
        while chain.len() < vars.len() {
            let Stmt::Forall { body, .. } = self.stmts[*chain.last().expect("non-empty")] else { unreachable!() };
            match &self.stmts[body] {
                Stmt::Forall { var, .. } if vars.contains(var) => chain.push(body),
                _ => {
                    let refs: Vec<&String> = names.iter().collect();
                    return Err(self.not_nested("reorder", &refs, body));
                }
            }
        }
        let loops: Vec<(IndexVarId, LoopAttrs)> = chain
            .iter()
            .map(|&s| match self.stmts[s] {
                Stmt::Forall { var, attrs, .. } => (var, attrs),
                _ => unreachable!(),
            })
            .collect();
        for (&s, v) in chain.iter().zip(&vars) {
            let attrs = loops.iter().find(|(w, _)| w == v).expect("in the chain").1;
            if let Stmt::Forall { var, attrs: a, .. } = &mut self.stmts[s] {
                *var = *v;
                *a = attrs;
            }
        }
        Ok(())
    }

    fn depth(&self, target: StmtId) -> usize {
        let mut stack = vec![(self.root, 0)];
        while let Some((s, d)) = stack.pop() {
            if s == target {
                return d;
            }
            stack.extend(self.child_stmts(s).into_iter().map(|c| (c, d + 1)));
        }
        usize::MAX
    }

    /// Whether a statement below `s` reads `tensor` with every variable `var` stands for (one,
    /// or several for a fused variable) as plain subscripts.
    fn reads_with(&self, s: StmtId, tensor: TensorId, var: IndexVarId) -> bool {
        let origins = self.origins(var);
        self.assignments(s).iter().any(|&a| {
            let Stmt::Assign { rhs, .. } = &self.stmts[a] else { return false };
            self.scope_accesses(*rhs).iter().any(|acc| {
                acc.tensor == tensor && origins.iter().all(|o| acc.subscripts.iter().any(|t| t.as_var() == Some(*o)))
            })
        })
    }

    fn scope_accesses(&self, e: crate::notation::ExprId) -> Vec<crate::notation::Access> {
        use crate::notation::Expr;
        let mut out = Vec::new();
        let mut stack = vec![e];
        while let Some(n) = stack.pop() {
            match &self.exprs[n] {
                Expr::Access(a) => out.push(a.clone()),
                Expr::Literal(_) => {}
                Expr::Neg(a) | Expr::Sum(_, a) => stack.push(*a),
                Expr::Binary(_, a, b) => stack.extend([*a, *b]),
            }
        }
        out
    }

    fn assignments(&self, s: StmtId) -> Vec<StmtId> {
        match &self.stmts[s] {
            Stmt::Assign { .. } => vec![s],
            _ => self.child_stmts(s).into_iter().flat_map(|c| self.assignments(c)).collect(),
        }
    }

    fn check_parallel(&self, s: StmtId, var: IndexVarId, race: OutputRace) -> Result<(), ScheduleError> {
        let name = self.vars[var].name.clone();
        let parallel_loops = |root: StmtId| -> Vec<IndexVarId> {
            let mut out = Vec::new();
            let mut stack = vec![root];
            while let Some(n) = stack.pop() {
                if let Stmt::Forall { var, attrs, .. } = &self.stmts[n]
                    && attrs.parallel.is_some()
                {
                    out.push(*var);
                }
                stack.extend(self.child_stmts(n));
            }
            out
        };
        if let Some(other) = parallel_loops(s).first() {
            return Err(ScheduleError::NestedParallel {
                var: name,
                relation: "around",
                other: self.vars[*other].name.clone(),
            });
        }
        for outer in parallel_loops(self.root) {
            let (outer_stmt, _) = self.loop_named("parallelize", &self.vars[outer].name)?;
            if self.subtree_contains(outer_stmt, s) {
                return Err(ScheduleError::NestedParallel {
                    var: name,
                    relation: "inside",
                    other: self.vars[outer].name.clone(),
                });
            }
        }
        if race == OutputRace::NoRaces {
            let origins = self.origins(var);
            for a in self.assignments(s) {
                let Stmt::Assign { lhs, op, .. } = &self.stmts[a] else { continue };
                // A temporary summed under a `where` inside the loop is each iteration's own;
                // one whose `where` is outside (the loop is one of its producer's) is shared.
                if self.temporaries.contains(&lhs.tensor) && *op == AssignOp::Accumulate && self.produced_inside(s, a) {
                    continue;
                }
                // Every variable the loop came from must index the result: a loop over the
                // positions of a fused `(i, j)` visits one `y(i)` from several iterations.
                let unindexed =
                    origins.iter().find(|o| !lhs.subscripts.iter().flat_map(|t| t.vars()).any(|v| v == **o));
                if let Some(&o) = unindexed {
                    let why = if o == var {
                        format!("`{name}` does not index it")
                    } else {
                        format!("`{name}` comes from `{}`, which does not index it", self.vars[o].name)
                    };
                    let tensor = &self.tensors[lhs.tensor].name;
                    // A temporary's name is the concrete form's (`t0`): say what it is.
                    let tensor = if self.temporaries.contains(&lhs.tensor) {
                        format!("the temporary `{tensor}` that -print-concrete shows")
                    } else {
                        format!("`{tensor}`")
                    };
                    return Err(ScheduleError::Races { var: name, tensor, why });
                }
            }
        }
        Ok(())
    }

    /// Whether the assignment `a` is in the producer of a `where` below `s`.
    fn produced_inside(&self, s: StmtId, a: StmtId) -> bool {
        let mut stack = self.child_stmts(s);
        while let Some(n) = stack.pop() {
            if let Stmt::Where { producer, .. } = &self.stmts[n]
                && self.subtree_contains(*producer, a)
            {
                return true;
            }
            stack.extend(self.child_stmts(n));
        }
        false
    }

    fn subtree_contains(&self, root: StmtId, target: StmtId) -> bool {
        root == target || self.child_stmts(root).into_iter().any(|c| self.subtree_contains(c, target))
    }
}
