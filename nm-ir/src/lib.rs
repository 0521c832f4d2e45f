//! # nm-ir: from tensor index notation to what lowering needs
//!
//! The middle of the nmsparse compiler. It takes a statement in index notation and the
//! formats of its tensors and produces the structures from which loops are emitted; it
//! generates no code itself.
//!
//! So far: [`notation`], tensor index notation with affine subscripts — AST, parser,
//! printer, `taco`'s reduction semantics, and semantic checks (tensor types, index variable
//! sizes, valid-convolution ranges); and [`concrete`], concrete index notation (`forall`,
//! `where`, `sequence`) with its printer, parser and `concretize`, and the scheduling
//! language; [`graph`], iteration graphs (tensor paths with unresolved variables, resolving and
//! reducing edges, concordant orders, cycles explained, DOT); [`lattice`], merge lattices for
//! co-iterating the tensors of an expression.
//!
//! ## Glossary
//!
//! - **dimension** vs **level**: a tensor has dimensions (its shape); its format stores them in
//!   levels, possibly permuted or blocked (see `nm_format::Format`).
//! - **coordinate** vs **position**: a coordinate is an index along a dimension or level; a
//!   position is where a stored component sits in a level's arrays.
//! - **index variable** vs **index term**: `i`, `p` are index variables; a subscript such as
//!   `2*i+p` is an index term (affine in the variables). A subscript that is more than one
//!   variable is **compound**.
//! - **free** vs **reduction** variable: free variables index the result; reduction variables
//!   are summed over, at the smallest subexpression containing all their uses.

#![deny(missing_docs)]

pub mod concrete;
pub mod graph;
pub mod id;
pub mod lattice;
pub mod notation;
pub mod plan;
