//! The loop IR: the small imperative language lowering emits and both back ends run.
//!
//! A [`Function`] owns its arrays (the kernel's parameters: each tensor's per-level `pos`,
//! `crd` or N:M metadata, then its values, each tagged with its [`Role`]) and its scalar
//! variables, and a body of [`Stmt`]s: declarations, assignments, loads and stores, `for`
//! (optionally parallel or unrolled), `while` for co-iteration, `if`/`else`, `break`, and
//! `resize` of an output array (sizes grown on demand while a sparse result is assembled), and
//! `sort` of a range of indices (the one runtime call, for workspaces).
//! The text form ([`Function`]'s `Display`, read back by [`Function::parse`]) is what the file
//! tests compare and hand-written kernels are written in.

mod parse;
mod print;
mod verify;

pub use parse::ParseError;
pub(crate) use print::symbol;
pub use verify::VerifyError;

use nm_ir::id;
use nm_ir::id::Arena;

id!(
    /// A scalar variable; prints as its name.
    VarId,
    "v"
);
id!(
    /// An array parameter; prints as its name.
    ArrayId,
    "a"
);

/// The type of a scalar variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// A position, coordinate or count (64-bit signed).
    Index,
    /// A 32-bit float value.
    F32,
    /// A 64-bit float value.
    F64,
    /// A condition.
    Bool,
}

/// The element type of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// 32-bit signed indices (workspace marks).
    I32,
    /// 64-bit signed indices: results' positions and coordinates, workspace lists.
    I64,
    /// 32-bit unsigned indices: an operand's positions or coordinates as nm-format stores them.
    U32,
    /// 64-bit unsigned: an operand's wide positions or coordinates, packed N:M metadata words.
    U64,
    /// 32-bit values.
    F32,
    /// 64-bit values.
    F64,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            _ => 8,
        }
    }

    /// Whether elements are floating point.
    pub fn is_float(self) -> bool {
        matches!(self, ElemType::F32 | ElemType::F64)
    }

    /// The scalar type a load produces.
    pub fn scalar(self) -> ScalarType {
        match self {
            ElemType::F32 => ScalarType::F32,
            ElemType::F64 => ScalarType::F64,
            _ => ScalarType::Index,
        }
    }
}

/// What an array is, as the kernel boundary decomposes tensors (after Triton's sparse-operand
/// decomposition): per level `pos`/`crd`, a band's `pos`/`first` or N:M metadata, then values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// `pos` of a compressed level.
    Pos {
        /// The tensor's name.
        tensor: String,
        /// The level.
        level: usize,
    },
    /// `crd` of a compressed or singleton level.
    Crd {
        /// The tensor's name.
        tensor: String,
        /// The level.
        level: usize,
    },
    /// The first coordinate of each parent's run, of a band level.
    First {
        /// The tensor's name.
        tensor: String,
        /// The level.
        level: usize,
    },
    /// Packed metadata of a structured N:M level.
    Metadata {
        /// The tensor's name.
        tensor: String,
        /// The level.
        level: usize,
    },
    /// The values of a tensor.
    Values {
        /// The tensor's name.
        tensor: String,
    },
    /// Scratch memory the kernel uses (a workspace).
    Scratch,
    /// A kernel-local array of `len` elements (a row accumulator small enough for registers):
    /// the C kernel declares it on its stack and ignores the argument; the interpreter uses
    /// the argument, which `arguments` sizes.
    Local {
        /// Its elements.
        len: usize,
    },
    /// `[first, end)` of the outermost loop, whether the call is a whole run, and where a
    /// sparse result's first entry goes: the caller runs row ranges on several threads (see
    /// [`crate::args::Partition`]).
    Bounds,
    /// A sparse workspace (an [`nm_ism::Workspace`] behind an [`nm_ism::Slot`]) collecting the
    /// components of a result the loops scatter into; finished into the result's arrays.
    Workspace {
        /// Extents of the result's levels, in storage order (the key space).
        extents: Vec<usize>,
        /// The result's level kinds.
        kinds: Vec<nm_format::LevelKind>,
        /// Policy and tuning.
        config: nm_ism::Config,
    },
}

/// One array parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayDecl {
    /// Its name in the text and in generated C.
    pub name: String,
    /// Element type.
    pub elem: ElemType,
    /// What it holds.
    pub role: Role,
    /// Whether the kernel writes it (and may grow it with `resize`).
    pub output: bool,
}

/// One scalar variable.
#[derive(Clone, Debug, PartialEq)]
pub struct VarDecl {
    /// Its name in the text and in generated C.
    pub name: String,
    /// Its type.
    pub ty: ScalarType,
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// Arithmetic negation.
    Neg,
    /// Logical not.
    Not,
    /// The number of trailing zero bits of a nonzero index (the lowest set bit's position).
    TrailingZeros,
    /// An index with its lowest set bit cleared (`x & (x - 1)` on the 64 bits).
    ClearLowestBit,
}

/// Binary operators; comparisons and `and`/`or` produce a `Bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division truncates)
    Div,
    /// `%` on indices
    Rem,
    /// The smaller operand.
    Min,
    /// The larger operand.
    Max,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `&&` (short-circuit)
    And,
    /// `||` (short-circuit)
    Or,
    /// Bits of an index shifted right, zeros shifted in (unsigned); the shift is below 64.
    Shr,
    /// Bits of an index shifted left; the shift is below 64.
    Shl,
    /// Bitwise and of indices.
    BitAnd,
    /// Bitwise or of indices.
    BitOr,
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An index constant.
    Int(i64),
    /// A float constant (of the function's value type where it meets one).
    Float(f64),
    /// A variable's value.
    Var(VarId),
    /// `array[index]`.
    Load(ArrayId, Box<Expr>),
    /// The number of elements of `array` (an index).
    Len(ArrayId),
    /// `op e`.
    Unary(UnOp, Box<Expr>),
    /// `a op b`.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `cond ? a : b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Declares and initializes a variable.
    Decl(VarId, Expr),
    /// `var = e`.
    Assign(VarId, Expr),
    /// `array[index] = value`, or `+=` when `accumulate`.
    Store {
        /// The array.
        array: ArrayId,
        /// The index.
        index: Expr,
        /// The value.
        value: Expr,
        /// Add instead of overwrite.
        accumulate: bool,
    },
    /// `for var in start..end`.
    For {
        /// The loop variable (an index).
        var: VarId,
        /// First value.
        start: Expr,
        /// One past the last value.
        end: Expr,
        /// The body.
        body: Vec<Stmt>,
        /// Iterations may run in parallel (`#pragma omp parallel for`).
        parallel: bool,
    },
    /// `while cond`.
    While {
        /// Checked before each iteration.
        cond: Expr,
        /// The body.
        body: Vec<Stmt>,
    },
    /// `if cond { then } else { otherwise }`.
    If {
        /// The condition.
        cond: Expr,
        /// Taken when true.
        then: Vec<Stmt>,
        /// Taken when false.
        otherwise: Vec<Stmt>,
    },
    /// Leaves the innermost loop.
    Break,
    /// Grows an output array to at least `len` elements (new elements are zero).
    Resize {
        /// The array.
        array: ArrayId,
        /// The length it needs.
        len: Expr,
    },
    /// Says that output `array`'s contents are its first `len` elements: the runner shortens
    /// it to them after the kernel. An output the body only appends to (see [`appended`])
    /// ends with one at the body's top level, which lets it grow without zeroing memory the
    /// kernel writes anyway.
    Written {
        /// The array.
        array: ArrayId,
        /// How many of its elements the kernel wrote.
        len: Expr,
    },
    /// Sorts `array[start..end]` (indices) ascending: a runtime call, for workspaces that
    /// hand over their coordinates in order.
    Sort {
        /// The array (of indices).
        array: ArrayId,
        /// First element.
        start: Expr,
        /// One past the last element.
        end: Expr,
        /// An array of the same type with room for `end - start` elements, which the sort
        /// may overwrite (no allocation per call).
        scratch: ArrayId,
    },
    /// Adds `value` at `key` to a workspace — inline in C: an append to the accumulation
    /// array (a flush through the slot when it is full), or `dense[key] += value`.
    Insert {
        /// The workspace argument.
        workspace: ArrayId,
        /// The component's key: its coordinates in storage order, linearized.
        key: Expr,
        /// Its first coordinate (in storage order): a `bucket` workspace's bucket, spelled out
        /// so that the C compiler sees it is invariant in the loops below it.
        first: Expr,
        /// The value.
        value: Expr,
    },
    /// Sorts and merges what the workspace holds and compresses it into the result's arrays
    /// (a runtime call).
    Finish {
        /// The workspace argument.
        workspace: ArrayId,
    },
    /// Asks the memory system for the cache line of `array[index]` ahead of its load: a hint
    /// that changes no result (`__builtin_prefetch`); `index` is always in bounds.
    Prefetch {
        /// The array.
        array: ArrayId,
        /// The element.
        index: Expr,
    },
    /// Asks for a line of bucket `bucket` of a `bucket`/`auto` workspace ahead of an insert
    /// into it: its head, or where its next component goes (which reads the head, so it comes
    /// after the head's own prefetch). A hint like [`Stmt::Prefetch`]; `bucket` is in range.
    PrefetchBucket {
        /// The workspace argument.
        workspace: ArrayId,
        /// The bucket (a first coordinate).
        bucket: Expr,
        /// Which line.
        line: BucketLine,
    },
}

/// The lines of a workspace bucket an insert touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketLine {
    /// Its head (data pointers, length, capacity).
    Head,
    /// Where its next key and value go.
    Tail,
}

impl Expr {
    /// Calls `visit` on this expression and every expression inside it, outermost first.
    pub fn walk(&self, visit: &mut impl FnMut(&Expr)) {
        visit(self);
        match self {
            Expr::Int(_) | Expr::Float(_) | Expr::Var(_) | Expr::Len(_) => {}
            Expr::Load(_, i) | Expr::Unary(_, i) => i.walk(visit),
            Expr::Binary(_, a, b) => {
                a.walk(visit);
                b.walk(visit);
            }
            Expr::Select(c, a, b) => {
                c.walk(visit);
                a.walk(visit);
                b.walk(visit);
            }
        }
    }
}

impl Stmt {
    /// Calls `visit` on the statement's own expressions (not those of statements nested in
    /// it; [`walk`] reaches those).
    pub fn exprs(&self, visit: &mut impl FnMut(&Expr)) {
        match self {
            Stmt::Decl(_, e) | Stmt::Assign(_, e) => visit(e),
            Stmt::Store { index, value, .. } => {
                visit(index);
                visit(value);
            }
            Stmt::For { start, end, .. } | Stmt::Sort { start, end, .. } => {
                visit(start);
                visit(end);
            }
            Stmt::While { cond, .. } | Stmt::If { cond, .. } => visit(cond),
            Stmt::Resize { len, .. } | Stmt::Written { len, .. } => visit(len),
            Stmt::Prefetch { index, .. } | Stmt::PrefetchBucket { bucket: index, .. } => visit(index),
            Stmt::Insert { key, first, value, .. } => {
                visit(key);
                visit(first);
                visit(value);
            }
            Stmt::Break | Stmt::Finish { .. } => {}
        }
    }
}

/// Calls `visit` on every statement of `body`, nested ones included, outermost first.
pub fn walk(body: &[Stmt], visit: &mut impl FnMut(&Stmt)) {
    for s in body {
        visit(s);
        match s {
            Stmt::For { body, .. } | Stmt::While { body, .. } => walk(body, visit),
            Stmt::If { then, otherwise, .. } => {
                walk(then, visit);
                walk(otherwise, visit);
            }
            _ => {}
        }
    }
}

/// For each array of `f`, whether the kernel only appends to it: an output whose length a
/// top-level `Written { array, len: n }` gives, where `n` is declared 0 at the top level (and
/// may then start at a row range's first entry, `bounds[3]`, also at the top level) and every
/// store to the array is a plain one at `n`, every change of `n` is `n = n + 1` right after
/// such a store in the same statement list, and nothing loads from the array — so each of its
/// elements from where `n` started to `n` was stored, and the ones before by the ranges before
/// (the runner gives a range the array's length as its first entry, or zero). The `crd` and
/// values of a sparse result assembled in order have this shape. The C runner grows such an
/// array without zeroing its new elements and claims only the `n` the kernel wrote (doubling
/// otherwise zeroes the memory twice over: a third of `C = A + Aᵀ`'s time).
pub fn appended(f: &Function) -> Vec<bool> {
    let mut out = vec![false; f.arrays.len()];
    let first_entry =
        f.arrays.iter().find(|(_, d)| d.role == Role::Bounds).map(|(b, _)| Expr::Load(b, Box::new(Expr::Int(3))));
    for s in &f.body {
        if let Stmt::Written { array, len: Expr::Var(n) } = s
            && f.arrays[*array].output
            && f.body.iter().filter(|s| matches!(s, Stmt::Decl(v, _) if v == n)).count() == 1
            && f.body.contains(&Stmt::Decl(*n, Expr::Int(0)))
            && appends_only(&f.body, *array, *n, Depth::Top { first_entry: first_entry.as_ref() })
        {
            out[nm_ir::id::Id::index(*array)] = true;
        }
    }
    out
}

/// Where [`appends_only`] looks.
#[derive(Clone, Copy)]
enum Depth<'a> {
    /// The function's own body, where the count is declared and may start at `first_entry`.
    Top { first_entry: Option<&'a Expr> },
    /// Inside a statement.
    Inside,
}

/// The conditions of [`appended`] on `body`.
fn appends_only(body: &[Stmt], array: ArrayId, count: VarId, depth: Depth) -> bool {
    let next = Expr::Binary(BinOp::Add, Box::new(Expr::Var(count)), Box::new(Expr::Int(1)));
    // A store at `count` since `count` last changed, in this list.
    let mut stored = false;
    let (top, first_entry) = match depth {
        Depth::Top { first_entry } => (true, first_entry),
        Depth::Inside => (false, None),
    };
    for s in body {
        let mut loads = false;
        s.exprs(&mut |e| e.walk(&mut |x| loads |= matches!(x, Expr::Load(a, _) if *a == array)));
        let fine = !loads
            && match s {
                Stmt::Store { array: a, index, accumulate, .. } if *a == array => {
                    stored = true;
                    !accumulate && *index == Expr::Var(count)
                }
                Stmt::Assign(v, e) if *v == count && Some(e) == first_entry => true,
                Stmt::Assign(v, e) if *v == count => std::mem::take(&mut stored) && *e == next,
                Stmt::Decl(v, _) if *v == count => top,
                Stmt::For { body, .. } | Stmt::While { body, .. } => appends_only(body, array, count, Depth::Inside),
                Stmt::If { then, otherwise, .. } => {
                    appends_only(then, array, count, Depth::Inside)
                        && appends_only(otherwise, array, count, Depth::Inside)
                }
                _ => true,
            };
        if !fine {
            return false;
        }
    }
    true
}

/// Whether `f` has a loop on OpenMP threads (`Stmt::For { parallel: true, .. }`).
pub fn has_parallel_loops(f: &Function) -> bool {
    any(&f.body, |s| matches!(s, Stmt::For { parallel: true, .. }))
}

/// Whether `body` sweeps a row of an array that `array` accepts: some loop's variable indexes
/// an accumulation into it (SpMM's `for j { C[i,j] += ... }`), as opposed to scattering into it
/// at coordinates read from a sparse operand (a convolution's `C[i, c - q] += ...`).
pub fn sweeps_row(body: &[Stmt], array: impl Fn(ArrayId) -> bool) -> bool {
    any(body, |s| match s {
        Stmt::For { var: v, body, .. } => any(body, |t| match t {
            Stmt::Store { array: a, index, accumulate: true, .. } if array(*a) => {
                let mut uses = false;
                index.walk(&mut |x| uses |= matches!(x, Expr::Var(w) if w == v));
                uses
            }
            _ => false,
        }),
        _ => false,
    })
}

/// Whether some statement of `body`, nested ones included, satisfies `test`.
pub fn any(body: &[Stmt], test: impl Fn(&Stmt) -> bool) -> bool {
    let mut found = false;
    walk(body, &mut |s| found |= test(s));
    found
}

/// A kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// Its name (a C identifier).
    pub name: String,
    /// Its array parameters, in ABI order.
    pub arrays: Arena<ArrayId, ArrayDecl>,
    /// Its scalar variables.
    pub vars: Arena<VarId, VarDecl>,
    /// Its body.
    pub body: Vec<Stmt>,
    /// An array whose accumulating stores are atomic adds: ranges of the outer loop that run on
    /// several threads add into it at the same elements (`parallelize(i, cpu_thread, atomics)`).
    pub atomic: Option<ArrayId>,
    /// How OpenMP hands out a parallel loop's iterations.
    pub omp_schedule: OmpSchedule,
}

/// How OpenMP hands out the iterations of a parallel loop (taco's `-schedule`): in chunks
/// taken as threads come free (the default: iterations of sparse loops differ in cost), or
/// fixed in advance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OmpSchedule {
    /// `schedule(static[, chunk])`.
    Static(Option<u32>),
    /// `schedule(dynamic, chunk)`.
    Dynamic(u32),
}

impl Default for OmpSchedule {
    fn default() -> Self {
        OmpSchedule::Dynamic(16)
    }
}

impl Function {
    /// An empty kernel.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            arrays: Arena::new(),
            vars: Arena::new(),
            body: Vec::new(),
            atomic: None,
            omp_schedule: OmpSchedule::default(),
        }
    }

    /// Adds an array parameter.
    pub fn array(&mut self, name: &str, elem: ElemType, role: Role, output: bool) -> ArrayId {
        self.arrays.push(ArrayDecl { name: name.to_string(), elem, role, output })
    }

    /// A new array with a name no other array has (`name`, else `name_2`, ...): for scratch
    /// arrays of which one statement may need several (one per iterator of the same level).
    pub fn fresh_array(&mut self, name: &str, elem: ElemType, role: Role, output: bool) -> ArrayId {
        let unique = unique_name(name, |n| self.arrays.iter().any(|(_, d)| d.name == n));
        self.array(&unique, elem, role, output)
    }

    /// Adds a scalar variable.
    pub fn var(&mut self, name: &str, ty: ScalarType) -> VarId {
        self.vars.push(VarDecl { name: name.to_string(), ty })
    }

    /// A new scalar variable with a name no other variable has (`name`, else `name_2`, ...):
    /// for declarations that may be nested in one of the same name and read it (`p = p`).
    pub fn fresh_var(&mut self, name: &str, ty: ScalarType) -> VarId {
        let unique = unique_name(name, |n| self.vars.iter().any(|(_, d)| d.name == n));
        self.var(&unique, ty)
    }
}

/// `name`, else `name_2`, `name_3`, ...: the first that is not `taken`.
fn unique_name(name: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut unique = name.to_string();
    let mut k = 2;
    while taken(&unique) {
        unique = format!("{name}_{k}");
        k += 1;
    }
    unique
}

/// Shorthands for building expressions in lowering code and tests.
pub mod build {
    use super::{ArrayId, BinOp, Expr, UnOp, VarId};

    /// `v`
    pub fn var(v: VarId) -> Expr {
        Expr::Var(v)
    }
    /// An index constant.
    pub fn int(v: i64) -> Expr {
        Expr::Int(v)
    }
    /// A float constant.
    pub fn float(v: f64) -> Expr {
        Expr::Float(v)
    }
    /// `a[i]`
    pub fn load(a: ArrayId, i: Expr) -> Expr {
        Expr::Load(a, Box::new(i))
    }
    /// `a op b`
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }
    /// `-e`
    pub fn neg(e: Expr) -> Expr {
        Expr::Unary(UnOp::Neg, Box::new(e))
    }
}
