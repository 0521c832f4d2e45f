//! Sparse results: assembled in append order (dense levels located, compressed levels
//! appending), or through a sparse workspace (insert, sort, merge).

use super::{DEFAULT_POLICY, LowerError, refuse};
use crate::ir::build::{bin, int, load, var};
use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, ScalarType, Stmt, VarId};
use nm_format::{Format, LevelKind};
use nm_ir::notation::{IndexVarId, TensorId};

/// A result assembled through a sparse workspace: the workspace argument and, per result
/// dimension, the stride of its coordinate in a key.
#[derive(Clone, Debug)]
pub(super) struct IsmResult {
    pub(super) slot: ArrayId,
    pub(super) strides: Vec<i64>,
    /// The result dimension its first level holds.
    pub(super) first_dim: usize,
}

impl IsmResult {
    /// Declares the result's level arrays and the workspace. Every level kind a workspace
    /// compresses into is accepted (dense, compressed unique or not, singleton).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn declare(
        f: &mut Function,
        params: &mut Vec<TensorId>,
        t: TensorId,
        name: &str,
        format: &Format,
        shape: &[usize],
        value: ElemType,
        config: nm_ism::Config,
        notes: &mut Vec<String>,
    ) -> Result<IsmResult, LowerError> {
        let levels = format.levels();
        for level in levels {
            if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
                return refuse(LowerError::Format, format!("blocked levels in the result `{name}`"));
            }
            if let LevelKind::Structured { .. } = level.kind {
                return refuse(LowerError::LoopOrder, format!("a structured N:M result `{name}` written out of order"));
            }
            if level.kind == LevelKind::Band {
                return refuse(
                    LowerError::Format,
                    format!(
                        "a band result `{name}`: band levels are read, not written (compute it in another format and convert it)"
                    ),
                );
            }
        }
        let extents = format.level_sizes(shape);
        let mut config = config;
        if config.policy == nm_ism::Policy::Dense {
            let bytes = extents.iter().fold((value.size() + 1) as u128, |b, &e| b.saturating_mul(e as u128));
            if let Some(avail) = nm_runtime::memory::available().filter(|&a| bytes > a / 2) {
                const GIB: f64 = (1u64 << 30) as f64;
                notes.push(format!(
                    "a dense workspace for `{name}` would take {:.1} GiB of {:.1} GiB available: using a sparse `{DEFAULT_POLICY}` workspace",
                    bytes as f64 / GIB,
                    avail as f64 / GIB
                ));
                config = nm_ism::Config { policy: DEFAULT_POLICY, ..nm_ism::Config::new(DEFAULT_POLICY) };
            }
        }
        for (l, level) in levels.iter().enumerate() {
            if matches!(level.kind, LevelKind::Compressed(_)) {
                f.array(&format!("{name}{l}_pos"), ElemType::I64, Role::Pos { tensor: name.into(), level: l }, true);
                params.push(t);
            }
            if !matches!(level.kind, LevelKind::Dense) {
                f.array(&format!("{name}{l}_crd"), ElemType::I64, Role::Crd { tensor: name.into(), level: l }, true);
                params.push(t);
            }
        }
        let layout = nm_ism::KeyLayout::new(&extents, config.policy)
            .or_else(|e| refuse(LowerError::Workspace, format!("a sparse workspace for `{name}` {shape:?}: {e}")))?;
        let kinds = levels.iter().map(|l| l.kind).collect();
        let slot =
            f.array(&format!("{name}_ws"), value, Role::Workspace { extents: extents.clone(), kinds, config }, true);
        params.push(t);
        let mut strides = vec![0i64; shape.len()];
        for (l, level) in levels.iter().enumerate() {
            strides[level.expr.dim()] = layout.strides()[l] as i64;
        }
        Ok(IsmResult { slot, strides, first_dim: levels.first().map_or(0, |l| l.expr.dim()) })
    }
}

/// A sparse result assembled in append order: dense levels located, compressed levels
/// appended with their `pos`/`crd` arrays grown by doubling.
#[derive(Clone, Debug)]
pub(super) struct Assembly {
    pub(super) kinds: Vec<LevelKind>,
    pub(super) sizes: Vec<usize>,
    pub(super) vars: Vec<IndexVarId>,
    pub(super) pos: Vec<Option<ArrayId>>,
    pub(super) crd: Vec<Option<ArrayId>>,
    /// Entries appended so far at each compressed level.
    pub(super) count: Vec<Option<VarId>>,
    /// Capacity of each compressed level's `crd` (and values, at the last level).
    pub(super) cap: Vec<Option<VarId>>,
    /// The position of each dense level in the current iteration.
    pub(super) position: Vec<Option<VarId>>,
    /// Entries below a compressed, non-last level when its coordinate was reached.
    pub(super) start: Vec<Option<VarId>>,
    pub(super) vals: Option<ArrayId>,
}

impl Assembly {
    pub(super) fn declare(
        f: &mut Function,
        params: &mut Vec<TensorId>,
        t: TensorId,
        name: &str,
        format: &Format,
        shape: &[usize],
    ) -> Result<Self, LowerError> {
        let levels = format.levels();
        let n = levels.len();
        let mut a = Assembly {
            kinds: levels.iter().map(|l| l.kind).collect(),
            sizes: format.level_sizes(shape),
            vars: Vec::new(),
            pos: vec![None; n],
            crd: vec![None; n],
            count: vec![None; n],
            cap: vec![None; n],
            position: vec![None; n],
            start: vec![None; n],
            vals: None,
        };
        for (l, level) in levels.iter().enumerate() {
            if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
                return refuse(LowerError::Format, format!("blocked levels in the result `{name}`"));
            }
            match level.kind {
                LevelKind::Dense if l + 1 == n || a.kinds[..l].iter().any(|k| *k != LevelKind::Dense) => {
                    return refuse(
                        LowerError::Format,
                        format!("a dense level below or after compressed ones in the result `{name}`"),
                    );
                }
                LevelKind::Dense => {}
                LevelKind::Compressed(p) if p.unique && p.ordered => {
                    a.pos[l] = Some(f.array(
                        &format!("{name}{l}_pos"),
                        ElemType::I64,
                        Role::Pos { tensor: name.into(), level: l },
                        true,
                    ));
                    a.crd[l] = Some(f.array(
                        &format!("{name}{l}_crd"),
                        ElemType::I64,
                        Role::Crd { tensor: name.into(), level: l },
                        true,
                    ));
                    params.extend([t, t]);
                    a.count[l] = Some(f.var(&format!("{name}{l}_n"), ScalarType::Index));
                    a.cap[l] = Some(f.var(&format!("{name}{l}_cap"), ScalarType::Index));
                }
                other => return refuse(LowerError::Format, format!("{other} levels in the result `{name}`")),
            }
        }
        Ok(a)
    }

    /// Number of positions of the dense levels above `l` (all dense, by construction).
    pub(super) fn dense_parents(&self, l: usize) -> usize {
        self.sizes[..l].iter().product()
    }

    pub(super) fn prologue(&mut self, f: &mut Function, vals: ArrayId) -> Vec<Stmt> {
        self.vals = Some(vals);
        let mut out = Vec::new();
        let last = self.kinds.len() - 1;
        for l in 0..self.kinds.len() {
            let (Some(n), Some(cap)) = (self.count[l], self.cap[l]) else { continue };
            out.push(Stmt::Decl(n, int(0)));
            out.push(Stmt::Decl(cap, int(16)));
            out.push(Stmt::Resize { array: self.crd[l].expect("compressed"), len: var(cap) });
            if l == last {
                out.push(Stmt::Resize { array: vals, len: var(cap) });
            }
            // pos: one entry per parent position plus one; a compressed parent grows it.
            let parents = if l == 0 || self.kinds[l - 1] == LevelKind::Dense {
                int(self.dense_parents(l) as i64 + 1)
            } else {
                int(17)
            };
            out.push(Stmt::Resize { array: self.pos[l].expect("compressed"), len: parents });
            if l + 1 < self.kinds.len() {
                self.start[l] = Some(f.var(&format!("start{l}"), ScalarType::Index));
            }
        }
        out
    }

    /// A row range's appends start at `bounds[3]`, where the caller says its first entry goes
    /// (see [`crate::args::Partition`]): the end of the ranges before it, for a range appended
    /// in place to the result, or zero for one written to arrays of its own. Follows
    /// [`Self::prologue`]; only a CSR-like result (dense rows, one compressed level) is ranged.
    pub(super) fn start_at(&self, bounds: ArrayId) -> Vec<Stmt> {
        let l = self.kinds.len() - 1;
        let (n, cap) = (self.count[l].expect("compressed"), self.cap[l].expect("compressed"));
        vec![
            Stmt::Assign(n, load(bounds, int(3))),
            Stmt::Assign(cap, bin(BinOp::Add, var(n), int(16))),
            Stmt::Resize { array: self.crd[l].expect("compressed"), len: var(cap) },
            Stmt::Resize { array: self.vals.expect("prologue ran"), len: var(cap) },
        ]
    }

    /// Doubles level `l`'s capacity when full (and what grows with it).
    pub(super) fn grow(&self, l: usize) -> Stmt {
        let (n, cap) = (self.count[l].expect("compressed"), self.cap[l].expect("compressed"));
        let mut then = vec![
            Stmt::Assign(cap, bin(BinOp::Mul, var(cap), int(2))),
            Stmt::Resize { array: self.crd[l].expect("compressed"), len: var(cap) },
        ];
        if l + 1 == self.kinds.len() {
            then.push(Stmt::Resize { array: self.vals.expect("prologue ran"), len: var(cap) });
        } else if let Some(child_pos) = self.pos[l + 1] {
            then.push(Stmt::Resize { array: child_pos, len: bin(BinOp::Add, var(cap), int(1)) });
        }
        Stmt::If { cond: bin(BinOp::Le, var(cap), var(n)), then, otherwise: vec![] }
    }

    /// Before the subtree of result level `l` at coordinate `v`.
    pub(super) fn before(&mut self, f: &mut Function, l: usize, v: VarId) -> Vec<Stmt> {
        match self.kinds[l] {
            LevelKind::Dense => {
                let parent = if l == 0 { int(0) } else { var(self.position[l - 1].expect("dense parents")) };
                let p = f.var(&format!("r{l}"), ScalarType::Index);
                self.position[l] = Some(p);
                vec![Stmt::Decl(p, bin(BinOp::Add, bin(BinOp::Mul, parent, int(self.sizes[l] as i64)), var(v)))]
            }
            _ if l + 1 < self.kinds.len() => {
                vec![Stmt::Decl(self.start[l].expect("declared"), var(self.count[l + 1].expect("compressed child")))]
            }
            _ => vec![],
        }
    }

    /// After the subtree of result level `l` at coordinate `v`: a compressed level that got
    /// children below it appends `v`; a dense parent records its child's count.
    pub(super) fn after(&self, l: usize, v: VarId) -> Vec<Stmt> {
        let mut out = Vec::new();
        if self.kinds[l] != LevelKind::Dense && l + 1 < self.kinds.len() {
            let (n, child) = (self.count[l].expect("compressed"), self.count[l + 1].expect("compressed child"));
            out.push(Stmt::If {
                cond: bin(BinOp::Lt, var(self.start[l].expect("declared")), var(child)),
                then: vec![
                    self.grow(l),
                    Stmt::Store {
                        array: self.crd[l].expect("compressed"),
                        index: var(n),
                        value: var(v),
                        accumulate: false,
                    },
                    Stmt::Store {
                        array: self.pos[l + 1].expect("compressed child"),
                        index: bin(BinOp::Add, var(n), int(1)),
                        value: var(child),
                        accumulate: false,
                    },
                    Stmt::Assign(n, bin(BinOp::Add, var(n), int(1))),
                ],
                otherwise: vec![],
            });
        }
        if self.kinds[l] == LevelKind::Dense
            && l + 1 < self.kinds.len()
            && let Some(child) = self.count[l + 1]
        {
            let r = self.position[l].expect("dense position");
            out.push(Stmt::Store {
                array: self.pos[l + 1].expect("compressed child"),
                index: bin(BinOp::Add, var(r), int(1)),
                value: var(child),
                accumulate: false,
            });
        }
        out
    }

    /// The write of one value at the last (compressed) level.
    pub(super) fn append(&self, v: VarId, value: Expr) -> Vec<Stmt> {
        let mut out = vec![self.grow(self.kinds.len() - 1)];
        out.extend(self.push(v, value));
        out
    }

    /// Room for `extra` more values at the last level, made before a run of [`Self::push`]es:
    /// one test for a row a workspace hands over, not one per value.
    pub(super) fn reserve(&self, extra: Expr) -> Stmt {
        let l = self.kinds.len() - 1;
        let (n, cap) = (self.count[l].expect("compressed"), self.cap[l].expect("compressed"));
        let need = bin(BinOp::Add, var(n), extra);
        Stmt::If {
            cond: bin(BinOp::Lt, var(cap), need.clone()),
            then: vec![
                Stmt::Assign(cap, bin(BinOp::Max, bin(BinOp::Mul, var(cap), int(2)), need)),
                Stmt::Resize { array: self.crd[l].expect("compressed"), len: var(cap) },
                Stmt::Resize { array: self.vals.expect("prologue ran"), len: var(cap) },
            ],
            otherwise: vec![],
        }
    }

    /// The write of one value at the last level where [`Self::reserve`] made room for it.
    pub(super) fn push(&self, v: VarId, value: Expr) -> Vec<Stmt> {
        let l = self.kinds.len() - 1;
        let n = self.count[l].expect("compressed");
        vec![
            Stmt::Store { array: self.crd[l].expect("compressed"), index: var(n), value: var(v), accumulate: false },
            Stmt::Store { array: self.vals.expect("prologue ran"), index: var(n), value, accumulate: false },
            Stmt::Assign(n, bin(BinOp::Add, var(n), int(1))),
        ]
    }

    /// How many values the last level holds so far.
    pub(super) fn last_count(&self) -> VarId {
        self.count[self.kinds.len() - 1].expect("compressed")
    }

    /// The lengths of what the kernel appended: each compressed level's `crd`, and the values
    /// (see [`Stmt::Written`]), so that they grow without zeroing.
    pub(super) fn written(&self) -> Vec<Stmt> {
        let mut out = Vec::new();
        for l in 0..self.kinds.len() {
            let (Some(crd), Some(n)) = (self.crd[l], self.count[l]) else { continue };
            out.push(Stmt::Written { array: crd, len: var(n) });
            if l + 1 == self.kinds.len() {
                out.push(Stmt::Written { array: self.vals.expect("prologue ran"), len: var(n) });
            }
        }
        out
    }

    /// `pos` of a compressed level under dense ones: rows no loop visited repeat the count
    /// before them (a running maximum); the top level's `pos` is `[0, count]`.
    pub(super) fn epilogue(&self, f: &mut Function) -> Vec<Stmt> {
        let mut out = Vec::new();
        for l in 0..self.kinds.len() {
            let (Some(pos), Some(n)) = (self.pos[l], self.count[l]) else { continue };
            if l == 0 {
                out.push(Stmt::Store { array: pos, index: int(1), value: var(n), accumulate: false });
            } else if self.kinds[l - 1] == LevelKind::Dense {
                let r = f.var(&format!("fix{l}"), ScalarType::Index);
                out.push(Stmt::For {
                    var: r,
                    start: int(0),
                    end: int(self.dense_parents(l) as i64),
                    body: vec![Stmt::Store {
                        array: pos,
                        index: bin(BinOp::Add, var(r), int(1)),
                        value: bin(BinOp::Max, load(pos, var(r)), load(pos, bin(BinOp::Add, var(r), int(1)))),
                        accumulate: false,
                    }],
                    parallel: false,
                });
            }
        }
        out
    }
}
