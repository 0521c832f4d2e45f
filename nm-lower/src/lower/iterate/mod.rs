//! Iterators per level kind: how a loop reads one stored level of an operand.
//!
//! What a level stores is its [`Level`], one variant per kind. The loop builder asks a level
//! for the positions below a parent position ([`Level::range`]) and for where the coordinate
//! of a position comes from ([`Level::coordinates`]); a dense level is located instead
//! (`dense`). A level the loop walks is opened as a [`Cursor`]: its position and end, the
//! coordinate it stands on ([`Cursor::read`]), whether it stands on the loop's value
//! ([`Cursor::on`]), how it moves on ([`Cursor::advance`]) and, where a non-unique level is
//! walked segment by segment, where its segment ends.
//!
//! One file per kind: `dense` (located: parent · size + coordinate), `compressed` (compressed
//! and singleton levels: `pos` and `crd`, and the search for one coordinate), `band` (a run
//! of coordinates per parent: `pos` and its first coordinate, no `crd`), `structured`
//! (N:M: N positions per block of M, offsets decoded from packed metadata) and `blocked`
//! (vector-wise `nm(N,M,L)`, whose four levels are walked at once). Under compound subscripts
//! (sparse convolution) a compressed level is walked by subsections ([`Subsection`]): `window`
//! (a window of an outer loop, and the loop that resolves the subscript) and `rows` (one
//! window start per row of a parent not resolved yet), with the searches they share in
//! `search`. A new level kind is a [`Level`] variant, the arms of the matches here, and its
//! file.

mod band;
mod blocked;
mod compressed;
mod dense;
mod rows;
mod search;
pub(super) mod structured;
mod window;

pub(super) use search::lower_bound;
pub(super) use window::settle;

use crate::ir::build::{bin, int, load, var};
use crate::ir::{ArrayId, BinOp, Expr, Stmt, VarId};
use crate::lower::{AccessId, Lowerer, Operand};
use nm_format::{LevelKind, LevelProperties};
use nm_ir::notation::{IndexTerm, IndexVarId};

/// One level of an operand as the kernel reads it: what it stores, by kind.
#[derive(Clone, Debug)]
pub(in crate::lower) enum Level {
    /// Every coordinate is present; stores nothing (located, see `dense`).
    Dense,
    /// The coordinates of parent position `p` in `crd[pos[p]..pos[p+1]]`.
    Compressed { pos: ArrayId, crd: ArrayId, props: LevelProperties },
    /// One coordinate per parent position, in `crd[p]` (COO's inner levels).
    Singleton { crd: ArrayId, props: LevelProperties },
    /// N of every M coordinates kept (see `structured`): `per_parent` positions per parent
    /// position, each one's offset in its block in `meta`.
    Structured { meta: ArrayId, n: u32, m: u32, per_parent: usize },
    /// The coordinates of parent position `p` are one run, `first[p]` onward, at positions
    /// `pos[p]..pos[p+1]` (see `band`).
    Band { pos: ArrayId, first: ArrayId },
    /// A level of a vector-wise N:M operand other than its metadata, of kind `kind`: the four
    /// are walked at once (see `blocked`).
    Blocked { kind: LevelKind },
}

impl Level {
    /// The level's kind, as its format names it (refusals say it).
    pub(in crate::lower) fn kind(&self) -> LevelKind {
        match self {
            Level::Dense => LevelKind::Dense,
            Level::Compressed { props, .. } => LevelKind::Compressed(*props),
            Level::Singleton { props, .. } => LevelKind::Singleton(*props),
            Level::Structured { n, m, .. } => LevelKind::Structured { n: *n, m: *m },
            Level::Band { .. } => LevelKind::Band,
            Level::Blocked { kind } => *kind,
        }
    }

    /// Whether every coordinate is present, so the level is located rather than walked.
    pub(in crate::lower) fn is_dense(&self) -> bool {
        self.kind() == LevelKind::Dense
    }

    /// Whether no coordinate repeats below one parent position.
    pub(in crate::lower) fn is_unique(&self) -> bool {
        self.kind().is_unique()
    }

    /// Whether coordinates below one parent position increase.
    pub(in crate::lower) fn is_ordered(&self) -> bool {
        self.kind().is_ordered()
    }

    /// Whether one coordinate is found by a binary search of its `crd` (an ordered compressed
    /// or singleton level).
    pub(in crate::lower) fn is_searchable(&self) -> bool {
        matches!(self, Level::Compressed { .. } | Level::Singleton { .. }) && self.is_ordered()
    }

    /// The `pos` array of a compressed level.
    pub(in crate::lower) fn pos(&self) -> Option<ArrayId> {
        match self {
            Level::Compressed { pos, .. } => Some(*pos),
            _ => None,
        }
    }

    /// The array a position's coordinate is read from: `crd`, or a structured level's metadata.
    pub(in crate::lower) fn crd(&self) -> Option<ArrayId> {
        match self {
            Level::Compressed { crd, .. } | Level::Singleton { crd, .. } => Some(*crd),
            Level::Structured { meta, .. } => Some(*meta),
            Level::Dense | Level::Band { .. } | Level::Blocked { .. } => None,
        }
    }

    /// A structured level's N and M.
    pub(in crate::lower) fn structured(&self) -> Option<(u32, u32)> {
        match self {
            Level::Structured { n, m, .. } => Some((*n, *m)),
            _ => None,
        }
    }

    /// The first position below parent position `parent` and one past the last, where the
    /// parent's range of positions ends at `parent_end` (its next position, or the end of its
    /// segment when walked segment by segment).
    pub(in crate::lower) fn range(&self, parent: Expr, parent_end: Expr) -> (Expr, Expr) {
        match self {
            Level::Compressed { pos, .. } | Level::Band { pos, .. } => compressed::range(*pos, parent, parent_end),
            Level::Structured { per_parent, .. } => structured::range(*per_parent, parent, parent_end),
            // A singleton's position is its parent's own.
            Level::Singleton { .. } | Level::Dense | Level::Blocked { .. } => (parent, parent_end),
        }
    }

    /// Where the coordinates of the positions below `parent` come from.
    pub(in crate::lower) fn coordinates(&self, parent: &Expr) -> Coordinates {
        match self {
            Level::Structured { meta, n, m, per_parent } => structured::coordinates(*meta, *n, *m, *per_parent, parent),
            Level::Band { pos, first } => band::coordinates(*pos, *first, parent),
            _ => Coordinates::Array(self.crd().expect("compressed or singleton")),
        }
    }
}

/// Where an iterator's coordinates come from.
#[derive(Clone, Debug)]
pub(in crate::lower) enum Coordinates {
    /// `crd[p]`.
    Array(ArrayId),
    /// A structured N:M level: position `p` is kept entry `(p - base) mod N` of block
    /// `(p - base) / N`, at offset `meta[p]` (⌈log2 M⌉ bits, packed in 64-bit words).
    Structured { meta: ArrayId, n: u32, m: u32, base: Expr },
    /// A band level's run: position `p` holds coordinate `p + shift` (`shift` the run's first
    /// coordinate less its first position).
    Run { shift: Expr },
    /// A compound subscript resolved by this loop: the stored coordinate is
    /// `offset + coef·v`, so `v = (raw - offset) / coef` (entries that give no such `v` are
    /// skipped, see [`settle`]).
    Mapped { raw: Box<Coordinates>, offset: Expr, coef: i64 },
    /// A compound subscript with variables left after this loop: the loop visits the values of
    /// `v`, from `next` on, whose window `[base + coef·v, base + coef·v + width]` holds an
    /// entry. For the entry at `p` (the window's first) that is the larger of `next` and
    /// `⌈(raw - base - width) / coef⌉`.
    Window { raw: Box<Coordinates>, base: Expr, coef: i64, width: i64, next: VarId },
    /// A rows iterator (`Subsection::Rows`): its coordinate is kept in `state`, recomputed by
    /// `advance` after `next` moves past the loop's value.
    Rows { state: VarId, advance: RowsAdvance },
}

/// How a rows iterator moves on: set `next`, then run `steps` (move every row's window start
/// past `next`'s window start, recompute the smallest `v`, end when there is none).
#[derive(Clone, Debug)]
pub(in crate::lower) struct RowsAdvance {
    pub(in crate::lower) next: VarId,
    pub(in crate::lower) steps: Vec<Stmt>,
}

impl Coordinates {
    /// The coordinate at position `p`.
    pub(in crate::lower) fn at(&self, p: Expr) -> Expr {
        match self {
            Coordinates::Array(crd) => load(*crd, p),
            Coordinates::Structured { meta, n, m, base } => structured::coordinate(*meta, *n, *m, base, p),
            Coordinates::Run { shift } => bin(BinOp::Add, p, shift.clone()),
            Coordinates::Mapped { raw, offset, coef } => window::resolved(raw.at(p), offset, *coef),
            Coordinates::Window { raw, base, coef, width, next } => {
                window::first_value(raw.at(p), base, *coef, *width, *next)
            }
            Coordinates::Rows { state, .. } => var(*state),
        }
    }

    /// The coordinate stored at position `p` (a segment is a run of equal ones; two stored
    /// coordinates may map to one loop value, `(raw - offset) / coef` truncating).
    pub(in crate::lower) fn stored(&self, p: Expr) -> Expr {
        match self {
            Coordinates::Mapped { raw, .. } | Coordinates::Window { raw, .. } => raw.stored(p),
            _ => self.at(p),
        }
    }
}

/// How the loop of `v` reaches a compressed level it iterates (see [`Coordinates`]).
#[derive(Clone, Debug)]
pub(in crate::lower) enum Subsection {
    /// Its subscript is `v`.
    Plain,
    /// A compound subscript whose other variables are bound: `coef` is `v`'s coefficient,
    /// `size` its extent.
    Last { term: IndexTerm, coef: i64, size: i64 },
    /// A compound subscript with variables still unbound, whose values span `width`.
    Window { term: IndexTerm, coef: i64, width: i64, size: i64 },
    /// A window (as `Window`) on a compressed level whose parent, a dense or compressed
    /// level, is not resolved yet (`I(i+r, j+q)` in CSR along `j` before `r`): the loop visits the `v`
    /// whose window holds an entry in any of the `span` rows the parent's subscript `rows`
    /// may still reach, keeping one window start per row (the paper's position-pair vectors).
    Rows { rows: IndexTerm, term: IndexTerm, coef: i64, width: i64, size: i64, span: i64 },
}

/// Where an outer loop left a compressed level's range: a window start and the level's end in
/// variables, or one start per row of an unresolved parent (`Subsection::Rows`), indexed by
/// the parent's position less `first`.
#[derive(Clone, Debug)]
pub(in crate::lower) enum Subrange {
    Start(VarId, VarId),
    /// The children of a level a `where` producer reads along an outer loop (see
    /// `Lowerer::guide`): `[from, to)`, empty where that level has no entry.
    Children(VarId, VarId),
    Rows {
        starts: ArrayId,
        first: Expr,
    },
}

/// The coefficient of `v` in `term`.
pub(in crate::lower) fn coefficient(term: &IndexTerm, v: IndexVarId) -> i64 {
    term.terms.iter().filter(|(_, w)| *w == v).map(|(c, _)| c).sum()
}

/// Where an iterator opens: what the opening of every kind needs.
pub(in crate::lower) struct Opening<'a> {
    /// The loop's variable.
    pub(in crate::lower) v: IndexVarId,
    /// The access and level.
    pub(in crate::lower) k: AccessId,
    pub(in crate::lower) l: usize,
    /// Its index among the loop's iterators (in the names it declares).
    pub(in crate::lower) n: usize,
    /// The prefix of the names it declares.
    pub(in crate::lower) tname: &'a str,
    /// Its position and end variables, declared at the level's range.
    pub(in crate::lower) p: VarId,
    pub(in crate::lower) end: VarId,
    /// The parent position.
    pub(in crate::lower) parent: Expr,
    /// Where an outer loop left the level's range.
    pub(in crate::lower) window: Option<Subrange>,
    /// The level's `pos` array, where it has one.
    pub(in crate::lower) level_pos: Option<ArrayId>,
}

/// An opened iterator over one level the loop walks (see `Lowerer::open_iterators`).
#[derive(Clone, Debug)]
pub(in crate::lower) struct Cursor {
    /// The position variable.
    pub(in crate::lower) pos: VarId,
    /// One past the last position it visits.
    pub(in crate::lower) end: VarId,
    /// The coordinate it stands on, read at the top of each iteration.
    pub(in crate::lower) coordinate: VarId,
    /// Where its coordinates come from.
    pub(in crate::lower) crd: Coordinates,
    /// The level's first position and one past the last, before any search narrowed it.
    pub(in crate::lower) range: (Expr, Expr),
    /// The end of the segment it stands on, where it is walked segment by segment.
    pub(in crate::lower) segment_end: VarId,
    /// Whether it is walked segment by segment (a non-unique level merged with others, or
    /// appended to a sparse result: each run of equal coordinates is one coordinate).
    pub(in crate::lower) segmented: bool,
    /// What a subsection iterator hands the loops inside, where it stands on a value.
    pub(in crate::lower) subrange: Option<Subrange>,
}

impl Cursor {
    /// Whether positions are left.
    pub(in crate::lower) fn live(&self) -> Expr {
        bin(BinOp::Lt, var(self.pos), var(self.end))
    }

    /// Whether it stands on the loop's value `loop_var`.
    pub(in crate::lower) fn on(&self, loop_var: VarId) -> Expr {
        bin(BinOp::Eq, var(self.coordinate), var(loop_var))
    }

    /// Reads the coordinate it stands on (and finds its segment's end). Where a loop over
    /// every coordinate drives it (`dense_mode`), a finished iterator reads a coordinate no
    /// loop value equals.
    pub(in crate::lower) fn read(&self, dense_mode: bool) -> Vec<Stmt> {
        let (p, end) = (self.pos, self.end);
        let value = if dense_mode {
            Expr::Select(Box::new(self.live()), Box::new(self.crd.at(var(p))), Box::new(int(-1)))
        } else {
            self.crd.at(var(p))
        };
        let mut out = vec![Stmt::Decl(self.coordinate, value)];
        if self.segmented {
            // The segment: every following entry with the same coordinate.
            let seg = self.segment_end;
            out.push(Stmt::Decl(seg, bin(BinOp::Add, var(p), int(1))));
            out.push(Stmt::While {
                cond: bin(
                    BinOp::And,
                    bin(BinOp::Lt, var(seg), var(end)),
                    bin(BinOp::Eq, self.crd.stored(var(seg)), self.crd.stored(var(p))),
                ),
                body: vec![Stmt::Assign(seg, bin(BinOp::Add, var(seg), int(1)))],
            });
        }
        out
    }

    /// Moves on past the loop's value `loop_var` (run where it stood on it), `size` being the
    /// loop's extent.
    pub(in crate::lower) fn advance(&self, loop_var: VarId, size: i64) -> Vec<Stmt> {
        let (p, end) = (self.pos, self.end);
        match &self.crd {
            Coordinates::Rows { advance, .. } => rows::advance(advance, loop_var),
            Coordinates::Window { .. } => window::advance(p, end, &self.crd, loop_var, size),
            _ => {
                let next = if self.segmented { var(self.segment_end) } else { bin(BinOp::Add, var(p), int(1)) };
                let mut then = vec![Stmt::Assign(p, next)];
                if matches!(self.crd, Coordinates::Mapped { .. }) {
                    then.extend(settle(p, end, &self.crd, size));
                }
                then
            }
        }
    }
}

impl Lowerer<'_> {
    /// The positions of access `k`'s level `l` under the parent position `parent`: from the
    /// level's `pos` (up to the end of the parent's segment when the parent is walked segment
    /// by segment), N per block of M of a structured level, the parent's own for a singleton.
    /// (Under a guide, its children's range: see [`Self::guide`].)
    pub(in crate::lower) fn level_range(&self, o: &Operand, k: AccessId, l: usize, parent: Expr) -> (Expr, Expr) {
        let children = self.windows.iter().rev().find_map(|w| match w {
            &(a, b, Subrange::Children(from, to)) if a == k && b == l => Some((from, to)),
            _ => None,
        });
        if let Some((from, to)) = children {
            return (var(from), var(to));
        }
        let parent_end = match self.segment(k, l) {
            Some(end) => var(end),
            None => bin(BinOp::Add, parent.clone(), int(1)),
        };
        o.levels[l].range(parent, parent_end)
    }

    /// The end of the segment access `k`'s level `l - 1` stands on, when that level is walked
    /// segment by segment.
    pub(in crate::lower) fn segment(&self, k: AccessId, l: usize) -> Option<VarId> {
        let parent = l.checked_sub(1)?;
        self.segments.iter().rev().find(|(a, b, _)| *a == k && *b == parent).map(|s| s.2)
    }
}
