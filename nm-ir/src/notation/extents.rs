//! How many values each index variable ranges over, and the shapes that follow.
//!
//! A variable that appears only as a plain subscript (`A(i,j)`) ranges over the dimensions it
//! indexes, which must agree with each other and with a size given for it (`-d=i:N`).
//!
//! A variable that also appears in a compound subscript (`B(i+1)`, `I(i+p)`) ranges over the
//! values that keep every access in bounds ("valid" semantics, as MLIR's iteration domains and
//! a convolution's valid mode have it): the smallest of the sizes given for it and of the
//! dimensions it indexes plainly, then narrowed until every compound subscript stays inside
//! its dimension. A plain access may then cover only part of its dimension: in
//! `D(i) = B(i+1) - B(i)`, `i` ranges over one value fewer than `B` has. Where a compound
//! subscript reaches past its dimension, the variable of it with the most values is the
//! position and is narrowed; the others are offsets (a filter's taps, a lag) and keep their
//! range. The domain is a box: `A(p) = I(i+p) * I(i)` sums, for every lag `p`, the same
//! `n - P + 1` products.
//!
//! A variable no size reaches takes the largest range that keeps a compound subscript where it
//! is the only variable without one inside its dimension (`O(i) = I(i+p) * F(p)`: `i` from
//! `I` and `F`).
//!
//! A tensor read from a file that does not state its shape (FROSTT `.tns` without a `# shape`
//! line) is *growable*: its dimensions are the smallest that hold its coordinates, and a plain
//! dimension grows to a larger size its variable has from elsewhere (`-d`, another operand).
//! Such a dimension gives its variable a size only when nothing else does; a coordinate past
//! the size a plain-only variable has from elsewhere is an error.

use super::check::SemanticError;
use super::{Access, IndexNotation, IndexTerm, IndexVarId};
use crate::id::Id;

/// What is known of the tensors and variables before the extents are settled.
#[derive(Clone, Debug, Default)]
pub struct SizeFacts {
    /// Per tensor (by id): its shape, where known.
    pub shapes: Vec<Option<Vec<usize>>>,
    /// Per tensor (by id): whether its shape is only the smallest holding its coordinates.
    pub growable: Vec<bool>,
    /// Per variable (by id): a size given for it, and where (for messages).
    pub given: Vec<Option<(usize, String)>>,
    /// Per tensor (by id): where its shape came from (`` `A`'s file a.mtx ``), for messages;
    /// `None` says `` `A` ``.
    pub described: Vec<Option<String>>,
    /// The size of a variable nothing determines; `None` makes that an error.
    pub default: Option<usize>,
}

/// The settled extents, and every tensor's shape with them.
#[derive(Clone, Debug, PartialEq)]
pub struct Extents {
    /// Per variable (by id): how many values it ranges over (0 for a variable no access uses).
    pub sizes: Vec<usize>,
    /// Per tensor (by id): its shape — as known, grown, or (for a tensor of unknown shape) the
    /// extents of its plain subscripts and the reach of its compound ones.
    pub shapes: Vec<Vec<usize>>,
}

impl IndexNotation {
    /// Settles every variable's extent from `facts` (see the module documentation).
    pub fn extents(&self, facts: &SizeFacts) -> Result<Extents, SemanticError> {
        let mut accesses = vec![&self.lhs];
        accesses.extend(self.accesses(self.rhs));
        let windowed: Vec<bool> = self
            .vars
            .iter()
            .map(|(v, _)| {
                accesses.iter().any(|a| a.subscripts.iter().any(|t| t.is_compound() && t.vars().any(|w| w == v)))
            })
            .collect();
        let known = |a: &Access| facts.shapes.get(a.tensor.index()).and_then(Option::as_ref);
        let origin = |a: &Access, d: usize| match facts.described.get(a.tensor.index()).and_then(Option::as_ref) {
            Some(said) => format!("{said} (dimension {})", d + 1),
            None => format!("`{}` dimension {d}", self.tensor_name(a.tensor)),
        };
        let growable = |a: &Access| facts.growable.get(a.tensor.index()).copied().unwrap_or(false);
        // Sizes from what states them: given sizes, and plain dimensions of stated shapes.
        let mut ext: Vec<Option<(usize, String)>> =
            (0..self.vars.len()).map(|v| facts.given.get(v).cloned().flatten()).collect();
        for a in &accesses {
            let (Some(shape), false) = (known(a), growable(a)) else { continue };
            for (d, t) in a.subscripts.iter().enumerate() {
                let Some(v) = t.as_var() else { continue };
                let here = (shape[d], origin(a, d));
                ext[v.index()] = match ext[v.index()].take() {
                    None => Some(here),
                    Some((n, at)) if n == here.0 => Some((n, at)),
                    Some((n, at)) if windowed[v.index()] => Some(if here.0 < n { here } else { (n, at) }),
                    Some((n, at)) => {
                        return Err(SemanticError::SizeConflict {
                            var: self.var_name(v).to_string(),
                            first: n,
                            first_at: at,
                            second: here.0,
                            rendered: self.caret(a),
                        });
                    }
                };
            }
        }
        // Growable dimensions: a size where nothing else gives one (the largest), else a
        // coordinate bound the size must hold (for a plain-only variable).
        let stated: Vec<bool> = ext.iter().map(Option::is_some).collect();
        for a in &accesses {
            let (Some(shape), true) = (known(a), growable(a)) else { continue };
            for (d, t) in a.subscripts.iter().enumerate() {
                let Some(v) = t.as_var() else { continue };
                let k = v.index();
                match &ext[k] {
                    Some((n, at)) if stated[k] && !windowed[k] && shape[d] > *n => {
                        return Err(SemanticError::CoordinatesBeyond {
                            name: self.tensor_name(a.tensor).to_string(),
                            dim: d,
                            needs: shape[d],
                            var: self.var_name(v).to_string(),
                            size: *n,
                            origin: at.clone(),
                        });
                    }
                    Some(_) if stated[k] => {}
                    Some((n, _)) if *n >= shape[d] => {}
                    _ => ext[k] = Some((shape[d], origin(a, d))),
                }
            }
        }
        // Growable tensors grow their plain dimensions to their variables' sizes.
        let mut shapes: Vec<Option<Vec<usize>>> =
            (0..self.tensors.len()).map(|t| facts.shapes.get(t).cloned().flatten()).collect();
        for a in &accesses {
            if !growable(a) {
                continue;
            }
            let Some(shape) = shapes[a.tensor.index()].as_mut() else { continue };
            for (d, t) in a.subscripts.iter().enumerate() {
                if let Some((n, _)) = t.as_var().and_then(|v| ext[v.index()].as_ref()) {
                    shape[d] = shape[d].max(*n);
                }
            }
        }
        let mut sizes: Vec<Option<usize>> = ext.iter().map(|e| e.as_ref().map(|(n, _)| *n)).collect();
        self.derive_unknown(&accesses, &shapes, &mut sizes, facts.default)?;
        let narrowed = self.narrow(&accesses, &shapes, &mut sizes)?;
        // A size given for a variable is how many values it has: more than keep every access
        // in bounds is an error, as for a plain-only variable.
        for (k, given) in facts.given.iter().enumerate() {
            if let (Some((g, at)), Some(n)) = (given, sizes[k])
                && n < *g
            {
                let limit = narrowed[k].or_else(|| {
                    accesses.iter().copied().find(|a| {
                        a.subscripts.iter().enumerate().any(|(d, t)| {
                            t.as_var().is_some_and(|v| v.index() == k)
                                && shapes[a.tensor.index()].as_ref().is_some_and(|s| s[d] == n)
                        })
                    })
                });
                return Err(SemanticError::SizeConflict {
                    var: self.var_name(IndexVarId::new(k)).to_string(),
                    first: *g,
                    first_at: at.clone(),
                    second: n,
                    rendered: limit.and_then(|a| self.caret(a)),
                });
            }
        }
        let sizes: Vec<usize> = sizes.into_iter().map(|s| s.unwrap_or(0)).collect();
        let shapes = shapes
            .into_iter()
            .enumerate()
            .map(|(t, shape)| {
                shape.unwrap_or_else(|| {
                    let a = accesses.iter().find(|a| a.tensor.index() == t).expect("every tensor is accessed");
                    a.subscripts
                        .iter()
                        .map(|s| reach(s, &sizes).map_or(0, |(_, high)| (high + 1).max(0) as usize))
                        .collect()
                })
            })
            .collect();
        Ok(Extents { sizes, shapes })
    }

    /// Sizes for the variables without one: from a compound subscript where a variable is the
    /// only one unknown, else `default`, else an error.
    fn derive_unknown(
        &self,
        accesses: &[&Access],
        shapes: &[Option<Vec<usize>>],
        sizes: &mut [Option<usize>],
        default: Option<usize>,
    ) -> Result<(), SemanticError> {
        let used = |v: IndexVarId| accesses.iter().any(|a| a.subscripts.iter().any(|t| t.vars().any(|w| w == v)));
        loop {
            let mut derived = None;
            'search: for a in accesses {
                let Some(shape) = &shapes[a.tensor.index()] else { continue };
                for (d, t) in a.subscripts.iter().enumerate() {
                    let unknown: Vec<&(i64, IndexVarId)> =
                        t.terms.iter().filter(|(_, v)| sizes[v.index()].is_none()).collect();
                    if let [(c, v)] = unknown.as_slice()
                        && *c > 0
                    {
                        derived = Some((*v, fitting(t, *v, shape[d], sizes).max(0) as usize));
                        break 'search;
                    }
                }
            }
            match derived {
                Some((v, n)) => sizes[v.index()] = Some(n),
                None => {
                    let Some(v) =
                        (0..sizes.len()).map(IndexVarId::new).find(|&v| sizes[v.index()].is_none() && used(v))
                    else {
                        return Ok(());
                    };
                    match default {
                        Some(n) => sizes[v.index()] = Some(n),
                        None => {
                            let first = accesses.iter().find(|a| a.subscripts.iter().any(|t| t.vars().any(|w| w == v)));
                            return Err(SemanticError::CannotInfer {
                                var: self.var_name(v).to_string(),
                                rendered: first.and_then(|a| self.caret(a)),
                            });
                        }
                    }
                }
            }
        }
    }

    /// Narrows the position variable of each compound subscript that reaches past its
    /// dimension until none does; per variable, the access that narrowed it last.
    fn narrow<'a>(
        &self,
        accesses: &[&'a Access],
        shapes: &[Option<Vec<usize>>],
        sizes: &mut [Option<usize>],
    ) -> Result<Vec<Option<&'a Access>>, SemanticError> {
        let mut narrowed = vec![None; sizes.len()];
        loop {
            let mut changed = false;
            for a in accesses {
                let Some(shape) = &shapes[a.tensor.index()] else { continue };
                for (d, t) in a.subscripts.iter().enumerate() {
                    let Some((low, high)) = reach(t, sizes).filter(|_| t.is_compound()) else { continue };
                    if high < shape[d] as i64 {
                        continue;
                    }
                    // The position: the variable with the most values (the first of equals).
                    let position = t
                        .terms
                        .iter()
                        .filter(|(c, _)| *c > 0)
                        .map(|&(_, v)| v)
                        .rev()
                        .max_by_key(|v| sizes[v.index()].unwrap_or(0));
                    let fit = position.map(|v| (v, fitting(t, v, shape[d], sizes)));
                    match fit {
                        Some((v, n)) if n >= 1 => {
                            sizes[v.index()] = Some(n as usize);
                            narrowed[v.index()] = Some(*a);
                            changed = true;
                        }
                        _ => {
                            return Err(SemanticError::OutOfRange {
                                name: self.tensor_name(a.tensor).to_string(),
                                dim: d,
                                low,
                                high,
                                size: shape[d],
                                rendered: self.caret(a),
                            });
                        }
                    }
                }
            }
            if !changed {
                return Ok(narrowed);
            }
        }
    }
}

/// The lowest and highest value a subscript takes, once all its variables have sizes (a
/// variable of no values makes it take none: `None`).
fn reach(t: &IndexTerm, sizes: &[impl Copy + Into<Option<usize>>]) -> Option<(i64, i64)> {
    let (mut low, mut high) = (t.constant, t.constant);
    for &(c, v) in &t.terms {
        let n: usize = sizes[v.index()].into()?;
        let top = (n as i64).checked_sub(1).filter(|&top| top >= 0)?;
        if c > 0 {
            high = high.saturating_add(c.saturating_mul(top));
        } else {
            low = low.saturating_add(c.saturating_mul(top));
        }
    }
    Some((low, high))
}

/// How many values `v` (coefficient > 0 in `t`) can take with the subscript staying below
/// `dim`, the other variables at their sizes (unknown ones count as one value).
fn fitting(t: &IndexTerm, v: IndexVarId, dim: usize, sizes: &[Option<usize>]) -> i64 {
    let mut room = dim as i64 - 1 - t.constant;
    let mut coefficient = 1;
    for &(c, w) in &t.terms {
        if w == v {
            coefficient = c;
        } else if c > 0 {
            room = room.saturating_sub(c.saturating_mul(sizes[w.index()].unwrap_or(1).saturating_sub(1) as i64));
        }
    }
    if room < 0 { 0 } else { room / coefficient + 1 }
}
