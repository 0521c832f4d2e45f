//! The merge lattice of every loop: along each variable of a nest, for each expression the
//! loops outside can hand it, the points that co-iterate its operands ([`crate::lattice`]).
//!
//! A loop's lattice depends on the expression it computes, and that is the sub-expression a
//! point of the loop outside handed on (`a(i)·b(i) + c(i)` along `i` hands `a·b + c`, `a·b`
//! and `c` to the loops inside). So the lattices form a tree: each point's expression has a
//! lattice along the next loop. The plan builds that tree down each nest (the main one and
//! every `where` producer's), materializing each point's expression as a node once (equal
//! points share it), and the lowering looks a loop's lattice up by (expression, variable).

use std::collections::HashMap;

use super::Nest;
use crate::concrete::{ConcreteNotation, Derivation};
use crate::id::Arena;
use crate::lattice::{LevelIterator, MergeLattice, PointExpr};
use crate::notation::{BinaryOp, Expr, ExprId, IndexVarId, Scope, Types};

use nm_format::Format;

/// A lattice point as the plan holds it: its iterators and the node of its expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Sorted, without duplicates (see [`crate::lattice::LatticePoint`]).
    pub iterators: Vec<LevelIterator>,
    /// What the loops inside compute while exactly these iterators run: a node of
    /// [`Lattices::exprs`].
    pub expr: ExprId,
}

/// The merge lattices of a statement's loops (see the module doc).
#[derive(Clone, Debug)]
pub struct Lattices {
    /// The statement's expression nodes, then those the lattice points compute.
    pub exprs: Arena<ExprId, Expr>,
    by_loop: HashMap<(ExprId, IndexVarId), Vec<Point>>,
}

/// How a point expression's nodes are shared: (operator, or `None` for a negation, operands).
type NodeKey = (Option<BinaryOp>, ExprId, Option<ExprId>);

struct Builder<'a> {
    cin: &'a ConcreteNotation,
    formats: Vec<Option<Format>>,
    lattices: Lattices,
    nodes: HashMap<NodeKey, ExprId>,
}

impl Lattices {
    /// The lattices of `nest`'s loops and its producers' in `cin`, whose tensors have `types`.
    pub fn new(cin: &ConcreteNotation, types: &Types, nest: &Nest) -> Lattices {
        let mut b = Builder {
            cin,
            formats: types.tensors.iter().map(|t| t.format.clone()).collect(),
            lattices: Lattices { exprs: cin.exprs.clone(), by_loop: HashMap::new() },
            nodes: HashMap::new(),
        };
        let mut bound = Vec::new();
        b.down(&nest.loops, nest.rhs, &mut bound);
        // Producers run at the main nest's leaf, inside every loop of it.
        for p in &nest.producers {
            let mut around = bound.clone();
            b.down(&p.loops, p.rhs, &mut around);
        }
        b.lattices
    }

    /// The points of the loop over `var` computing `expr`, most iterators first; `None` where
    /// no loop of the plan computes `expr` along `var`.
    pub fn along(&self, expr: ExprId, var: IndexVarId) -> Option<&[Point]> {
        self.by_loop.get(&(expr, var)).map(Vec::as_slice)
    }

    /// How many loop lattices the plan holds.
    pub fn len(&self) -> usize {
        self.by_loop.len()
    }

    /// Whether it holds none (a statement without loops).
    pub fn is_empty(&self) -> bool {
        self.by_loop.is_empty()
    }
}

impl Builder<'_> {
    /// The lattices of `loops` (outermost first) computing `rhs`, inside loops that bound
    /// `bound`; on return `bound` holds `loops`' variables too.
    fn down(&mut self, loops: &[(IndexVarId, bool)], rhs: ExprId, bound: &mut Vec<IndexVarId>) {
        let mut computed = vec![rhs];
        for &(v, _) in loops {
            // The variable a loop co-iterates along: a split's inner loop walks its parent's
            // coordinates; a split's block loop and a fused pair's loop co-iterate nothing.
            let along = match self.cin.derivations.get(&v) {
                Some(&Derivation::Split { parent, outer: false, .. }) => Some(parent),
                Some(Derivation::Split { outer: true, .. } | Derivation::Fuse { .. }) => None,
                _ => Some(v),
            };
            let Some(u) = along else {
                bound.push(v);
                continue;
            };
            let mut next = Vec::new();
            for &e in &computed {
                for p in self.lattice(e, u, bound) {
                    if !next.contains(&p.expr) {
                        next.push(p.expr);
                    }
                }
            }
            bound.push(u);
            computed = next;
        }
    }

    /// The lattice of `e` along `u`, built once.
    fn lattice(&mut self, e: ExprId, u: IndexVarId, bound: &[IndexVarId]) -> Vec<Point> {
        if let Some(points) = self.lattices.by_loop.get(&(e, u)) {
            return points.clone();
        }
        let lattice = {
            let scope = Scope { tensors: &self.cin.tensors, vars: &self.cin.vars, exprs: &self.lattices.exprs };
            MergeLattice::build(scope, &self.formats, e, u, bound)
        };
        let points: Vec<Point> = lattice
            .points
            .into_iter()
            .map(|p| Point { expr: self.materialize(&p.expr), iterators: p.iterators })
            .collect();
        self.lattices.by_loop.insert((e, u), points.clone());
        points
    }

    /// The node of a point's expression, shared with equal ones made before.
    fn materialize(&mut self, p: &PointExpr) -> ExprId {
        let (key, node) = match p {
            PointExpr::Node(e) => return *e,
            PointExpr::Neg(a) => {
                let a = self.materialize(a);
                ((None, a, None), Expr::Neg(a))
            }
            PointExpr::Binary(op, a, b) => {
                let (a, b) = (self.materialize(a), self.materialize(b));
                ((Some(*op), a, Some(b)), Expr::Binary(*op, a, b))
            }
        };
        if let Some(&e) = self.nodes.get(&key) {
            return e;
        }
        let e = self.lattices.exprs.push(node);
        self.nodes.insert(key, e);
        e
    }
}
