//! Iteration graphs: which index variables must be bound before which, as the tensors' storage
//! orders require.
//!
//! Every access (the result's included) contributes a **tensor path**: one node per level of
//! its format, in storage order, each holding the subscript of the dimension the level stores
//! and its *unresolved* variables (those of the subscript not already bound by an earlier level
//! of the same path). A level that must be iterated (compressed, singleton, N:M) can only be
//! reached once every earlier level of the path is resolved, so each variable of the earlier
//! levels gets an edge to each unresolved variable of that level: a **resolving** edge when the
//! level's subscript is a single variable, a **reducing** edge when it is compound (binding one
//! variable of `i+p` only shrinks the unresolved set). Dense levels are located, so they impose
//! no order. A loop order is *concordant* when it follows every edge; a cycle means no order
//! can be (say B in CSR and C in CSC in `B(i,j) * C(i,j)`), and the error says which operand
//! to store the other way.
//!
//! These edges are the conservative form of the convolution paper's graph: they never allow
//! binding a compound subscript's variables before the earlier levels are resolved, which the
//! subsection iteration of non-empty windows will relax.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use nm_format::{Format, LevelKind};

use crate::notation::{Access, IndexNotation, IndexTerm, IndexVarId, TensorId, Types};

/// One level of a tensor path.
#[derive(Clone, Debug, PartialEq)]
pub struct PathNode {
    /// The level of the tensor's format.
    pub level: usize,
    /// Its kind.
    pub kind: LevelKind,
    /// The subscript of the dimension it stores.
    pub term: IndexTerm,
    /// Variables of `term` not bound by an earlier level of the path.
    pub unresolved: BTreeSet<IndexVarId>,
}

/// The levels of one access, in storage order.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPath {
    /// The tensor.
    pub tensor: TensorId,
    /// Whether this is the result.
    pub output: bool,
    /// One node per level.
    pub nodes: Vec<PathNode>,
}

/// Whether an edge completes a level's subscript or only narrows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// The target is the level's whole subscript.
    Resolving,
    /// The target is one variable of a compound subscript.
    Reducing,
}

/// `from` must be bound before `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Edge {
    /// The outer variable.
    pub from: IndexVarId,
    /// The inner variable.
    pub to: IndexVarId,
    /// Resolving or reducing.
    pub kind: EdgeKind,
    /// The tensor whose path requires it.
    pub tensor: TensorId,
    /// Whether that tensor is the result.
    pub output: bool,
}

/// The iteration graph of one statement.
#[derive(Clone, Debug, PartialEq)]
pub struct IterationGraph {
    /// Every index variable of the statement, in order of first appearance.
    pub vars: Vec<IndexVarId>,
    /// One path per access.
    pub paths: Vec<TensorPath>,
    /// Ordering constraints, without duplicates.
    pub edges: Vec<Edge>,
}

/// No loop order satisfies every tensor's storage order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no loop order follows every tensor's storage order: {cycle}; {suggestion}")]
pub struct CycleError {
    /// The cycle, as `i -> j (B) -> i (C)`.
    pub cycle: String,
    /// What to change.
    pub suggestion: String,
}

impl IterationGraph {
    /// The graph of `stmt`, with the formats of `types`.
    pub fn build(stmt: &IndexNotation, types: &Types) -> IterationGraph {
        let mut paths = vec![path(&stmt.lhs, true, types)];
        paths.extend(stmt.accesses(stmt.rhs).into_iter().map(|a| path(a, false, types)));
        let mut edges: Vec<Edge> = Vec::new();
        for p in &paths {
            for (j, node) in p.nodes.iter().enumerate() {
                if node.kind == LevelKind::Dense {
                    continue;
                }
                let kind = if node.term.is_compound() { EdgeKind::Reducing } else { EdgeKind::Resolving };
                let before: BTreeSet<IndexVarId> = p.nodes[..j].iter().flat_map(|n| n.term.vars()).collect();
                for &from in &before {
                    for &to in &node.unresolved {
                        let e = Edge { from, to, kind, tensor: p.tensor, output: p.output };
                        if !edges.contains(&e) {
                            edges.push(e);
                        }
                    }
                }
            }
        }
        let mut vars = Vec::new();
        for p in &paths {
            for n in &p.nodes {
                for v in n.term.vars() {
                    if !vars.contains(&v) {
                        vars.push(v);
                    }
                }
            }
        }
        IterationGraph { vars, paths, edges }
    }

    /// The edges `order` breaks (`to` bound before `from`); variables missing from `order` are
    /// not judged.
    pub fn violations(&self, order: &[IndexVarId]) -> Vec<Edge> {
        let at = |v: IndexVarId| order.iter().position(|&w| w == v);
        self.edges.iter().filter(|e| matches!((at(e.from), at(e.to)), (Some(a), Some(b)) if a > b)).copied().collect()
    }

    /// A concordant loop order: the variables sorted so every edge points inward, ties broken
    /// by `preferred` (the order the statement suggests, e.g. free variables first).
    pub fn concordant_order(
        &self,
        preferred: &[IndexVarId],
        stmt: &IndexNotation,
    ) -> Result<Vec<IndexVarId>, CycleError> {
        let rank = |v: IndexVarId| preferred.iter().position(|&w| w == v).unwrap_or(usize::MAX);
        let mut left: Vec<IndexVarId> = self.vars.clone();
        left.sort_by_key(|&v| rank(v));
        let mut order = Vec::new();
        while !left.is_empty() {
            let ready = left
                .iter()
                .position(|&v| !self.edges.iter().any(|e| e.to == v && left.contains(&e.from) && e.from != v));
            match ready {
                Some(k) => order.push(left.remove(k)),
                None => return Err(self.cycle_error(&left, stmt)),
            }
        }
        Ok(order)
    }

    fn cycle_error(&self, left: &[IndexVarId], stmt: &IndexNotation) -> CycleError {
        // Walk backwards along edges among the remaining variables until one repeats.
        let mut seen = vec![left[0]];
        let mut back: Vec<Edge> = Vec::new();
        let cycle_edges: Vec<Edge> = loop {
            let v = *seen.last().expect("non-empty");
            let e = *self
                .edges
                .iter()
                .find(|e| e.to == v && left.contains(&e.from))
                .expect("every remaining variable has a predecessor among them");
            back.push(e);
            if let Some(k) = seen.iter().position(|&w| w == e.from) {
                break back[k..].iter().rev().copied().collect();
            }
            seen.push(e.from);
        };
        let name = |v: IndexVarId| stmt.var_name(v).to_string();
        let mut cycle = name(cycle_edges[0].from);
        let mut tensors: Vec<TensorId> = Vec::new();
        for e in &cycle_edges {
            let _ = write!(cycle, " -> {} ({})", name(e.to), stmt.tensor_name(e.tensor));
            if !tensors.contains(&e.tensor) {
                tensors.push(e.tensor);
            }
        }
        let operand = tensors.iter().rev().find(|&&t| t != stmt.lhs.tensor).or(tensors.last()).copied();
        let suggestion = match operand {
            Some(t) => format!(
                "store `{}` with its dimensions in the other order (e.g. csc instead of csr) or transpose it",
                stmt.tensor_name(t)
            ),
            None => "store one of the tensors with its dimensions in the other order".to_string(),
        };
        CycleError { cycle, suggestion }
    }

    /// The graph in Graphviz DOT: one node per variable, one edge per constraint labelled by
    /// the tensor (dashed when reducing), and the tensor paths as comments.
    pub fn to_dot(&self, stmt: &IndexNotation) -> String {
        let mut s = String::from("digraph iteration_graph {\n");
        for p in &self.paths {
            let nodes: Vec<String> = p
                .nodes
                .iter()
                .map(|n| {
                    let mut term = String::new();
                    let _ = stmt.scope().write_access(
                        &mut term,
                        &Access { tensor: p.tensor, subscripts: vec![n.term.clone()], span: None },
                    );
                    let inner =
                        term.trim_start_matches(stmt.tensor_name(p.tensor)).trim_matches(|c| c == '(' || c == ')');
                    format!("{}:{}", n.kind, inner)
                })
                .collect();
            let _ = writeln!(
                s,
                "  // {}{}: {}",
                stmt.tensor_name(p.tensor),
                if p.output { " (result)" } else { "" },
                nodes.join(" -> ")
            );
        }
        for &v in &self.vars {
            let _ = writeln!(s, "  {};", stmt.var_name(v));
        }
        for e in &self.edges {
            let style = if e.kind == EdgeKind::Reducing { ", style=dashed" } else { "" };
            let _ = writeln!(
                s,
                "  {} -> {} [label=\"{}\"{style}];",
                stmt.var_name(e.from),
                stmt.var_name(e.to),
                stmt.tensor_name(e.tensor)
            );
        }
        s.push_str("}\n");
        s
    }
}

fn path(access: &Access, output: bool, types: &Types) -> TensorPath {
    let ty = &types.tensors[crate::id::Id::index(access.tensor)];
    let format = ty.format.clone().unwrap_or_else(|| Format::dense(access.subscripts.len().max(1)));
    let mut bound: BTreeSet<IndexVarId> = BTreeSet::new();
    let nodes = if access.subscripts.is_empty() {
        Vec::new()
    } else {
        format
            .levels()
            .iter()
            .enumerate()
            .map(|(l, level)| {
                let term = access.subscripts[level.expr.dim()].clone();
                let unresolved: BTreeSet<IndexVarId> = term.vars().filter(|v| !bound.contains(v)).collect();
                bound.extend(term.vars());
                PathNode { level: l, kind: level.kind, term, unresolved }
            })
            .collect()
    };
    TensorPath { tensor: access.tensor, output, nodes }
}
