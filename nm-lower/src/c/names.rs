//! The C identifiers of a kernel's variables and arrays.
//!
//! The loop IR names its variables after index variables, tensors and accesses, and two of
//! its variables may share a name (the interpreter tells them apart by id). C only has the
//! names, so the emitter gives every variable and array an identifier of its own: its IR name
//! where that is free, else the name with a suffix. A name is never one the emitted code
//! uses for something else — a C keyword, a macro or function of the headers it includes, a
//! local of the code the emitter writes around statements (`key`, `row`, `b`, `n_`), the
//! kernel's parameter `args` — so a tensor or index variable may be called anything the
//! expression language accepts.

use std::collections::HashSet;

use crate::ir::{ArrayId, Function, Stmt, VarId};
use nm_ir::id::Id;

/// Operands a dense scatter loop may read before it starts (a product of a few tensors' values).
const HOISTED: usize = 4;

/// Names the emitted code uses for itself, and C's keywords.
const RESERVED: &[&str] = &[
    // C99 and C11 keywords.
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "asm",
    "typeof",
    "alignas",
    "alignof",
    "noreturn",
    "static_assert",
    "thread_local",
    // What the emitter writes: the parameter, block locals, types, functions and macros.
    "args",
    "key",
    "row",
    "b",
    "n_",
    "main",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "uintptr_t",
    "intptr_t",
    "size_t",
    "ptrdiff_t",
    "fmin",
    "fminf",
    "fmax",
    "fmaxf",
    "fmod",
    "fmodf",
    "memset",
    "memcpy",
    "malloc",
    "calloc",
    "realloc",
    "free",
    "abs",
    "labs",
    "llabs",
    "math_errhandling",
    "errno",
    "omp_set_num_threads",
];

/// Every variable's and array's C identifier, and the name of each loop's end.
pub(super) struct Names {
    vars: Vec<String>,
    arrays: Vec<String>,
    ends: Vec<Option<String>>,
    /// Per workspace with a dense array (`dense`, `auto`): the locals holding its slot's
    /// `dense` and `mark` pointers.
    dense: Vec<Option<(String, String)>>,
    /// Per workspace with a dense array: the locals a dense scatter loop reads its
    /// loop-invariant operands into (as many as it may hoist).
    invariants: Vec<Vec<String>>,
}

impl Names {
    /// Identifiers for every variable and array of `f`, and for the end of each of its loops,
    /// none of them the name of a function of `library` (the kernels emitted with `f`).
    pub(super) fn of(f: &Function, library: &[&str]) -> Names {
        let mut taken: HashSet<String> = RESERVED.iter().map(|s| s.to_string()).collect();
        for name in library.iter().copied().chain([f.name.as_str()]) {
            taken.insert(name.to_string());
            taken.insert(format!("{name}_threads"));
        }
        let mut claim = |name: &str| {
            let base = safe(name);
            let mut unique = base.clone();
            let mut k = 2;
            while taken.contains(&unique) {
                unique = format!("{base}_{k}");
                k += 1;
            }
            taken.insert(unique.clone());
            unique
        };
        let arrays: Vec<String> = f.arrays.iter().map(|(_, a)| claim(&a.name)).collect();
        let vars: Vec<String> = f.vars.iter().map(|(_, v)| claim(&v.name)).collect();
        let mut ends = vec![None; vars.len()];
        crate::ir::walk(&f.body, &mut |s| {
            if let Stmt::For { var, .. } = s
                && ends[var.index()].is_none()
            {
                ends[var.index()] = Some(claim(&format!("{}_end", vars[var.index()])));
            }
        });
        let mut invariants = vec![Vec::new(); arrays.len()];
        let dense = f
            .arrays
            .iter()
            .map(|(id, a)| match &a.role {
                crate::ir::Role::Workspace { config, .. }
                    if matches!(config.policy, nm_ism::Policy::Dense | nm_ism::Policy::Auto) =>
                {
                    let w = &arrays[id.index()];
                    invariants[id.index()] = (0..HOISTED).map(|k| claim(&format!("{w}_inv{k}"))).collect();
                    Some((claim(&format!("{w}_dense")), claim(&format!("{w}_mark"))))
                }
                _ => None,
            })
            .collect();
        Names { vars, arrays, ends, dense, invariants }
    }

    /// The locals a dense scatter loop into workspace `a` reads invariant operands into (none
    /// where it has no dense array).
    pub(super) fn invariants(&self, a: ArrayId) -> &[String] {
        &self.invariants[a.index()]
    }

    /// The locals holding workspace `a`'s `dense` and `mark` pointers, where it has them.
    pub(super) fn dense(&self, a: ArrayId) -> Option<&(String, String)> {
        self.dense[a.index()].as_ref()
    }

    pub(super) fn var(&self, v: VarId) -> &str {
        &self.vars[v.index()]
    }

    pub(super) fn array(&self, a: ArrayId) -> &str {
        &self.arrays[a.index()]
    }

    /// The variable holding the end of the loop over `v`.
    pub(super) fn end(&self, v: VarId) -> &str {
        self.ends[v.index()].as_deref().expect("a loop variable")
    }
}

/// `name` as an identifier that no header macro or reserved identifier can be: C reserves
/// names starting with `_`, and the headers' object-like macros are written in capitals.
fn safe(name: &str) -> String {
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit() || c == '_') {
        s.insert(0, 'v');
    }
    if !s.chars().any(|c| c.is_ascii_lowercase()) || s.starts_with("nms_") || s.starts_with("omp_") {
        s.push('_');
    }
    s
}
