//! Merge lattices: how the tensors read by an expression are co-iterated along one index
//! variable.
//!
//! Each tensor level that the variable indexes is an *iterator*: a compressed, singleton or
//! N:M level must be iterated (it lists only some coordinates), a dense level can be located.
//! A lattice point is a set of iterators that are all still running, with the expression that
//! computes the result while exactly those have components (`taco`, Kjolstad et al. 2017):
//! multiplication intersects (only points where both operands have components), addition
//! unions (the intersection, then each side alone). Points are ordered from most to fewest
//! iterators; lowering emits one `while` per point with cases for the points below it.
//!
//! Simplification: a dense iterator (or a constant) never runs out, so a disjunction adds the
//! points where one side stands alone only if the other side can run out — every point of it
//! has a sparse iterator. `B(i) + C(i)` with B dense has no C-alone point; `b(i) + c(i)·d(i)`
//! with d dense keeps its b-alone point (c runs out). Dense iterators of a point are located
//! rather than iterated.
//!
//! Compound subscripts (the convolution paper's stateful lattices): an iterator records the
//! subscript's unresolved variables before and after the loop, so `C(i+j)` along `i` is a
//! subsection iterator still waiting for `j`.

use std::fmt;

use nm_format::{Format, LevelKind};

use crate::notation::{BinaryOp, Expr, ExprId, IndexTerm, IndexVarId, Scope, TensorId};

/// One tensor level indexed by the lattice's variable, as one access reads it.
///
/// An iterator belongs to an access, not to a tensor: `B(i,k) * B(j,k)` along `k` co-iterates
/// two iterators over `B`'s second level (one per row), while the same access written twice
/// (`B(i,j) * C(i,j) - C(i,j) * B(i,j)`) is one iterator.
///
/// For a compound subscript (`C(i+j)`) the iterator is *stateful*: `pre` are the subscript's
/// variables still unresolved when the loop starts, `post` those still unresolved after it binds
/// its variable. A level whose `post` is not empty is not resolved by this loop: it is iterated
/// by non-empty subsections, and a later loop finishes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LevelIterator {
    /// The tensor.
    pub tensor: TensorId,
    /// The level of its format.
    pub level: usize,
    /// The access's subscripts: which read of the tensor this is.
    pub subscripts: Vec<IndexTerm>,
    /// Whether the level lists every coordinate (dense), so it can be located.
    pub full: bool,
    /// Unresolved variables of the level's subscript before this loop.
    pub pre: Vec<IndexVarId>,
    /// Unresolved variables after it.
    pub post: Vec<IndexVarId>,
}

/// A lattice point: iterators still running, and what to compute there.
#[derive(Clone, Debug, PartialEq)]
pub struct LatticePoint {
    /// Sorted, without duplicates.
    pub iterators: Vec<LevelIterator>,
    /// The expression with every access that has run out dropped.
    pub expr: PointExpr,
}

/// An expression as it stands at one lattice point.
#[derive(Clone, Debug, PartialEq)]
pub enum PointExpr {
    /// A node of the statement, whole.
    Node(ExprId),
    /// `-e`.
    Neg(Box<PointExpr>),
    /// `a op b`.
    Binary(BinaryOp, Box<PointExpr>, Box<PointExpr>),
}

/// The lattice of one expression along one variable.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeLattice {
    /// Points, most iterators first.
    pub points: Vec<LatticePoint>,
}

/// Where each tensor is stored; `None` for a dense row-major tensor.
pub type Formats<'a> = &'a [Option<Format>];

impl MergeLattice {
    /// The lattice of `expr` along `var`, inside loops that already bound `bound`.
    pub fn build(
        scope: Scope<'_>,
        formats: Formats<'_>,
        expr: ExprId,
        var: IndexVarId,
        bound: &[IndexVarId],
    ) -> MergeLattice {
        let ctx = Context { scope, formats, var, bound };
        let mut lattice = build(&ctx, expr);
        lattice.simplify();
        lattice
    }

    fn simplify(&mut self) {
        self.points.sort_by_key(|p| std::cmp::Reverse(p.iterators.len()));
        let mut seen: Vec<Vec<LevelIterator>> = Vec::new();
        self.points.retain(|p| {
            let new = !seen.contains(&p.iterators);
            seen.push(p.iterators.clone());
            new
        });
    }

    /// Whether some point must be iterated (it has a sparse iterator); a lattice of dense
    /// iterators only is a plain `for` loop.
    pub fn needs_merge(&self) -> bool {
        self.points.iter().any(|p| p.iterators.iter().any(|it| !it.full))
    }

    /// The lattice as text: one line per point, `lp0: [B.1 C.1*] | B(i) + C(i)`, where `*` marks
    /// a dense (located) iterator and `{i,j→j}` the unresolved variables of a stateful one
    /// before and after the loop.
    pub fn display<'a>(&'a self, scope: Scope<'a>) -> impl fmt::Display + 'a {
        LatticeText { lattice: self, scope }
    }
}

struct LatticeText<'a> {
    lattice: &'a MergeLattice,
    scope: Scope<'a>,
}

impl fmt::Display for LatticeText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, p) in self.lattice.points.iter().enumerate() {
            let its: Vec<String> = p
                .iterators
                .iter()
                .map(|it| {
                    let names = |vs: &[IndexVarId]| {
                        vs.iter().map(|&v| self.scope.vars[v].name.as_str()).collect::<Vec<_>>().join(",")
                    };
                    let state = if it.pre.len() > 1 || !it.post.is_empty() {
                        format!("{{{}→{}}}", names(&it.pre), names(&it.post))
                    } else {
                        String::new()
                    };
                    let located = if it.full { "*" } else { "" };
                    // A tensor read by several accesses names the access.
                    let reads = self.lattice.points.iter().flat_map(|p| &p.iterators);
                    let name = if reads.filter(|o| o.tensor == it.tensor).any(|o| o.subscripts != it.subscripts) {
                        let mut text = String::new();
                        let access = crate::notation::Access {
                            tensor: it.tensor,
                            subscripts: it.subscripts.clone(),
                            span: None,
                        };
                        let _ = self.scope.write_access(&mut text, &access);
                        text
                    } else {
                        self.scope.tensors[it.tensor].name.clone()
                    };
                    format!("{name}.{}{located}{state}", it.level)
                })
                .collect();
            write!(f, "lp{k}: [{}] | ", its.join(" "))?;
            let mut text = String::new();
            write_point(self.scope, &mut text, &p.expr, 0, false)?;
            writeln!(f, "{text}")?;
        }
        Ok(())
    }
}

fn write_point(scope: Scope<'_>, f: &mut String, e: &PointExpr, outer: u8, right: bool) -> fmt::Result {
    use std::fmt::Write;
    let (inner, text) = match e {
        PointExpr::Node(n) => {
            let mut t = String::new();
            scope.write_expr(&mut t, *n)?;
            let prec = match &scope.exprs[*n] {
                Expr::Binary(op, ..) => op.precedence(),
                Expr::Neg(_) => 3,
                _ => 4,
            };
            (prec, t)
        }
        PointExpr::Neg(a) => {
            let mut t = String::from("-");
            write_point(scope, &mut t, a, 3, false)?;
            (3, t)
        }
        PointExpr::Binary(op, a, b) => {
            let mut t = String::new();
            write_point(scope, &mut t, a, op.precedence(), false)?;
            write!(t, " {} ", op.symbol())?;
            write_point(scope, &mut t, b, op.precedence(), true)?;
            (op.precedence(), t)
        }
    };
    if inner < outer || (right && inner == outer) { write!(f, "({text})") } else { f.write_str(&text) }
}

/// The level of `tensor` that stores dimension `dim` (the first, for a blocked dimension).
fn level_of(format: Option<&Format>, dim: usize) -> (usize, bool) {
    match format {
        None => (dim, true),
        Some(f) => {
            let l = f.levels().iter().position(|l| l.expr.dim() == dim).expect("every dimension is stored");
            (l, f.levels()[l].kind == LevelKind::Dense)
        }
    }
}

struct Context<'a> {
    scope: Scope<'a>,
    formats: Formats<'a>,
    var: IndexVarId,
    bound: &'a [IndexVarId],
}

fn build(ctx: &Context<'_>, e: ExprId) -> MergeLattice {
    let (scope, formats, var) = (ctx.scope, ctx.formats, ctx.var);
    let leaf = |iterators: Vec<LevelIterator>| MergeLattice {
        points: vec![LatticePoint { iterators, expr: PointExpr::Node(e) }],
    };
    match &scope.exprs[e] {
        Expr::Access(a) => {
            let iterators = a
                .subscripts
                .iter()
                .enumerate()
                .filter(|(_, t)| t.vars().any(|v| v == var))
                .map(|(dim, term)| {
                    let (level, full) =
                        level_of(formats.get(crate::id::Id::index(a.tensor)).and_then(Option::as_ref), dim);
                    let mut pre: Vec<IndexVarId> = term.vars().filter(|v| !ctx.bound.contains(v)).collect();
                    pre.sort();
                    pre.dedup();
                    let post = pre.iter().copied().filter(|&v| v != var).collect();
                    LevelIterator { tensor: a.tensor, level, subscripts: a.subscripts.clone(), full, pre, post }
                })
                .collect();
            leaf(iterators)
        }
        Expr::Literal(_) => leaf(vec![]),
        Expr::Sum(_, inner) => {
            // A nested reduction reads its operand whole at each point.
            let lattice = build(ctx, *inner);
            MergeLattice {
                points: lattice
                    .points
                    .into_iter()
                    .map(|p| LatticePoint { iterators: p.iterators, expr: PointExpr::Node(e) })
                    .collect(),
            }
        }
        Expr::Neg(a) => {
            let lattice = build(ctx, *a);
            let points = lattice
                .points
                .into_iter()
                .map(|p| LatticePoint { iterators: p.iterators, expr: PointExpr::Neg(Box::new(p.expr)) })
                .collect();
            keep_whole(MergeLattice { points }, e)
        }
        Expr::Binary(op, a, b) => {
            // `*` and `/` intersect (taco's convention for `/`: where the divisor is not stored
            // there is no entry, not the ±inf or NaN of a dense division); `+` and `-` add
            // each side alone below.
            let (la, lb) = (build(ctx, *a), build(ctx, *b));
            let mut points = Vec::new();
            for pa in &la.points {
                for pb in &lb.points {
                    points.push(LatticePoint {
                        iterators: union(&pa.iterators, &pb.iterators),
                        expr: PointExpr::Binary(*op, Box::new(pa.expr.clone()), Box::new(pb.expr.clone())),
                    });
                }
            }
            if matches!(op, BinaryOp::Add | BinaryOp::Sub) {
                // Disjunction: each side also alone, once the other side has run out — which
                // happens only if every point of the other side has a sparse iterator (dense
                // iterators and constants never run out).
                let can_end = |l: &MergeLattice| l.points.iter().all(|p| p.iterators.iter().any(|it| !it.full));
                if can_end(&lb) {
                    points.extend(la.points.iter().cloned());
                }
                if can_end(&la) {
                    points.extend(lb.points.iter().map(|p| LatticePoint {
                        iterators: p.iterators.clone(),
                        expr: if *op == BinaryOp::Sub {
                            PointExpr::Neg(Box::new(p.expr.clone()))
                        } else {
                            p.expr.clone()
                        },
                    }));
                }
            }
            keep_whole(MergeLattice { points }, e)
        }
    }
}

/// The points holding every iterator hold every operand: they compute the node as written.
fn keep_whole(mut lattice: MergeLattice, e: ExprId) -> MergeLattice {
    let whole = lattice.points.iter().map(|p| p.iterators.len()).max().unwrap_or(0);
    for p in &mut lattice.points {
        if p.iterators.len() == whole {
            p.expr = PointExpr::Node(e);
        }
    }
    lattice
}

fn union(a: &[LevelIterator], b: &[LevelIterator]) -> Vec<LevelIterator> {
    let mut out: Vec<LevelIterator> = a.iter().chain(b).cloned().collect();
    out.sort();
    out.dedup();
    out
}
