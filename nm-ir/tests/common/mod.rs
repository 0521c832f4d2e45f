//! Shared test helpers: random index notation statements built without the parser.
#![allow(dead_code)]

use nm_ir::notation::{Access, AssignOp, BinaryOp, Expr, ExprId, IndexNotation, IndexTerm, IndexVar, TensorVar};
use proptest::prelude::*;

/// A random statement built directly (not through the parser): tensors `T0..T3` of fixed
/// orders, variables `i..m`, affine subscripts with small coefficients and constants.
pub fn statement() -> impl Strategy<Value = IndexNotation> {
    let term =
        (proptest::collection::vec((prop_oneof![Just(1i64), Just(-1), Just(2), Just(3)], 0usize..5), 1..3), -3i64..4);
    let leaf = prop_oneof![
        (0usize..4, proptest::collection::vec(term.clone(), 3)).prop_map(|(t, subs)| (Some((t, subs)), 0.0)),
        prop_oneof![Just(0.5f64), Just(2.0), Just(1e-7), Just(3e20)].prop_map(|v| (None, v)),
    ];
    let expr = leaf.prop_map(Node::Leaf).prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|a| Node::Neg(Box::new(a))),
            (0usize..5, inner.clone()).prop_map(|(v, a)| Node::Sum(v, Box::new(a))),
            (
                prop_oneof![Just(BinaryOp::Add), Just(BinaryOp::Sub), Just(BinaryOp::Mul), Just(BinaryOp::Div)],
                inner.clone(),
                inner
            )
                .prop_map(|(op, a, b)| Node::Binary(op, Box::new(a), Box::new(b))),
        ]
    });
    (expr, any::<bool>()).prop_map(|(root, accumulate)| build(&root, accumulate))
}

/// A generated subscript: `(coefficient, variable number)` terms and a constant.
type Subscript = (Vec<(i64, usize)>, i64);

/// A generated leaf: an access (tensor number, subscripts) or, when `None`, the literal.
type Leaf = (Option<(usize, Vec<Subscript>)>, f64);

#[derive(Clone, Debug)]
enum Node {
    Leaf(Leaf),
    Neg(Box<Node>),
    Sum(usize, Box<Node>),
    Binary(BinaryOp, Box<Node>, Box<Node>),
}

const ORDERS: [usize; 4] = [0, 1, 2, 3];
const VARS: [&str; 5] = ["i", "j", "k", "l", "m"];

fn build(root: &Node, accumulate: bool) -> IndexNotation {
    let mut s = IndexNotation {
        source: None,
        tensors: Default::default(),
        vars: Default::default(),
        exprs: Default::default(),
        lhs: Access { tensor: nm_ir::id::Id::new(0), subscripts: vec![], span: None },
        op: if accumulate { AssignOp::Accumulate } else { AssignOp::Assign },
        rhs: nm_ir::id::Id::new(0),
    };
    let out = s.tensors.push(TensorVar { name: "out".into(), order: 2 });
    for (k, &o) in ORDERS.iter().enumerate() {
        s.tensors.push(TensorVar { name: format!("T{k}"), order: o });
    }
    let vars: Vec<_> = VARS.iter().map(|n| s.vars.push(IndexVar { name: n.to_string() })).collect();
    s.lhs = Access { tensor: out, subscripts: vec![IndexTerm::var(vars[0]), IndexTerm::var(vars[1])], span: None };
    fn go(s: &mut IndexNotation, n: &Node, vars: &[nm_ir::notation::IndexVarId]) -> ExprId {
        let e = match n {
            Node::Leaf((Some((t, subs)), _)) => {
                let tensor = nm_ir::id::Id::new(t + 1);
                let order = ORDERS[*t];
                let subscripts = subs[..order]
                    .iter()
                    .map(|(terms, c)| {
                        let mut terms: Vec<(i64, _)> = terms.iter().map(|&(k, v)| (k, vars[v])).collect();
                        if terms.is_empty() {
                            terms.push((1, vars[0]));
                        }
                        IndexTerm { terms, constant: *c }
                    })
                    .collect();
                Expr::Access(Access { tensor, subscripts, span: None })
            }
            Node::Leaf((None, v)) => Expr::Literal(*v),
            Node::Neg(a) => Expr::Neg(go(s, a, vars)),
            Node::Sum(v, a) => Expr::Sum(vars[*v], go(s, a, vars)),
            Node::Binary(op, a, b) => {
                let (a, b) = (go(s, a, vars), go(s, b, vars));
                Expr::Binary(*op, a, b)
            }
        };
        s.exprs.push(e)
    }
    s.rhs = go(&mut s, root, &vars);
    s
}
