//! Typed ids and the arenas that hand them out: an index variable is an `IndexVarId`, never a
//! bare `usize`, and prints the way the IR text names it.

use std::fmt;
use std::marker::PhantomData;

/// Declares a `u32` id type whose `Display` is `prefix` followed by the number (for every
/// nmsparse IR: `nm_ir::id!(StmtId, "s")`).
#[macro_export]
macro_rules! id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u32);

        impl $crate::id::Id for $name {
            fn new(index: usize) -> Self {
                Self(u32::try_from(index).expect("fewer than 2^32 entities"))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}
pub use id;

/// What an arena needs of an id type.
pub trait Id: Copy {
    /// The id of the `index`-th entity.
    fn new(index: usize) -> Self;
    /// Its position in the arena.
    fn index(self) -> usize;
}

/// A growable vector indexed by a typed id.
#[derive(Clone, PartialEq)]
pub struct Arena<I, T> {
    items: Vec<T>,
    _id: PhantomData<I>,
}

impl<I: Id, T> Arena<I, T> {
    /// An empty arena.
    pub fn new() -> Self {
        Self { items: Vec::new(), _id: PhantomData }
    }

    /// Stores `item` and returns its id.
    pub fn push(&mut self, item: T) -> I {
        self.items.push(item);
        I::new(self.items.len() - 1)
    }

    /// The item `id` names, or `None` where it names none of this arena's (an id from
    /// another arena, or a corrupted one): for verifiers, which must not index blindly.
    pub fn get(&self, id: I) -> Option<&T> {
        self.items.get(id.index())
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Ids and items in creation order.
    pub fn iter(&self) -> impl Iterator<Item = (I, &T)> {
        self.items.iter().enumerate().map(|(i, t)| (I::new(i), t))
    }
}

impl<I: Id, T> Arena<I, T> {
    /// The ids of its entities, in order.
    pub fn ids(&self) -> impl Iterator<Item = I> + use<I, T> {
        (0..self.items.len()).map(I::new)
    }
}

impl<I: Id, T> FromIterator<T> for Arena<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(items: It) -> Self {
        Arena { items: items.into_iter().collect(), _id: PhantomData }
    }
}

impl<I: Id, T> Default for Arena<I, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Id, T> std::ops::Index<I> for Arena<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.items[id.index()]
    }
}

impl<I: Id, T> std::ops::IndexMut<I> for Arena<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.items[id.index()]
    }
}

impl<I: Id + fmt::Display, T: fmt::Debug> fmt::Debug for Arena<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(i, t)| (i.to_string(), t))).finish()
    }
}

/// A side table over the ids of an arena made elsewhere: at most one value per id, each
/// either set or not (`self[id]` is an `Option`). The lowering keeps, per index variable, the
/// loop variable bound to it, and per tensor its decomposed arrays, in these rather than in
/// vectors indexed by bare numbers.
#[derive(Clone, PartialEq)]
pub struct IdMap<I, T> {
    items: Vec<Option<T>>,
    _id: PhantomData<I>,
}

impl<I: Id, T> IdMap<I, T> {
    /// A table for the `len` ids of an arena, none set.
    pub fn new(len: usize) -> Self {
        Self { items: std::iter::repeat_with(|| None).take(len).collect(), _id: PhantomData }
    }

    /// The ids that are set, with their values, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (I, &T)> {
        self.items.iter().enumerate().filter_map(|(i, t)| Some((I::new(i), t.as_ref()?)))
    }
}

impl<I: Id, T> std::ops::Index<I> for IdMap<I, T> {
    type Output = Option<T>;
    fn index(&self, id: I) -> &Option<T> {
        &self.items[id.index()]
    }
}

impl<I: Id, T> std::ops::IndexMut<I> for IdMap<I, T> {
    fn index_mut(&mut self, id: I) -> &mut Option<T> {
        &mut self.items[id.index()]
    }
}

impl<I: Id + fmt::Display, T: fmt::Debug> fmt::Debug for IdMap<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(i, t)| (i.to_string(), t))).finish()
    }
}
