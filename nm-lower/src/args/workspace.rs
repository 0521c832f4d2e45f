//! Sparse workspaces in kernels: the argument that carries an [`nm_ism::Workspace`], and
//! compressing a finished workspace into the kernel's result arrays — the one step both back
//! ends share (the interpreter calls it directly, a C kernel through its slot's `finish`).

use nm_format::LevelKind;
use nm_ism::{Config, IsmError, Workspace};

use crate::args::ArrayData;
use crate::ir::{ArrayId, ElemType, Function, Role};

/// A workspace argument, of the kernel's value type.
pub enum WorkspaceData {
    /// Over `f32` values.
    F32(Box<Workspace<f32>>),
    /// Over `f64` values.
    F64(Box<Workspace<f64>>),
}

impl WorkspaceData {
    /// An empty workspace over `extents` for `elem` values.
    pub fn new(elem: ElemType, extents: &[usize], config: Config) -> Result<Self, IsmError> {
        Ok(match elem {
            ElemType::F32 => WorkspaceData::F32(Workspace::new(extents, config)?),
            _ => WorkspaceData::F64(Workspace::new(extents, config)?),
        })
    }

    /// Its value type.
    pub fn elem(&self) -> ElemType {
        match self {
            WorkspaceData::F32(_) => ElemType::F32,
            WorkspaceData::F64(_) => ElemType::F64,
        }
    }

    /// What it did in the last run.
    pub fn stats(&self) -> nm_ism::Stats {
        match self {
            WorkspaceData::F32(w) => w.stats(),
            WorkspaceData::F64(w) => w.stats(),
        }
    }

    fn parts(&self) -> (&[usize], Config) {
        match self {
            WorkspaceData::F32(w) => (w.extents(), w.config()),
            WorkspaceData::F64(w) => (w.extents(), w.config()),
        }
    }

    pub(crate) fn slot(&mut self) -> *mut nm_ism::Slot {
        match self {
            WorkspaceData::F32(w) => w.slot(),
            WorkspaceData::F64(w) => w.slot(),
        }
    }

    /// Adds `v` at `key` (the interpreter's insert).
    pub(crate) fn insert_key(&mut self, key: i64, v: f64) -> Result<(), IsmError> {
        let key = u64::try_from(key).map_err(|_| IsmError::Internal(format!("negative workspace key {key}")))?;
        match self {
            WorkspaceData::F32(w) => w.insert_key(key, v as f32),
            WorkspaceData::F64(w) => w.insert_key(key, v),
        }
    }

    /// How many buckets (first coordinates) the workspace has.
    pub(crate) fn buckets(&self) -> usize {
        let extents = match self {
            WorkspaceData::F32(w) => w.extents(),
            WorkspaceData::F64(w) => w.extents(),
        };
        extents.first().copied().unwrap_or(1)
    }

    /// Whether `key`'s first coordinate is `first`.
    pub(crate) fn first_coordinate_is(&self, key: i64, first: i64) -> bool {
        let layout = match self {
            WorkspaceData::F32(w) => w.layout(),
            WorkspaceData::F64(w) => w.layout(),
        };
        let mut c = vec![0usize; layout.extents().len()];
        key >= 0 && {
            layout.decode(key as u64, &mut c);
            c.first().map_or(first == 0, |&c0| c0 as i64 == first)
        }
    }

    /// Why a call from generated code failed.
    pub(crate) fn take_error(&mut self) -> Option<IsmError> {
        match self {
            WorkspaceData::F32(w) => w.take_error(),
            WorkspaceData::F64(w) => w.take_error(),
        }
    }

    /// Finishes the workspace into the result arrays: `exchange(array, contents)` puts
    /// `contents` in the kernel's parameter `array` and returns what was there (whose memory
    /// the next result reuses).
    pub(crate) fn finish(
        &mut self,
        targets: &Targets,
        mut exchange: impl FnMut(ArrayId, ArrayData<'static>) -> ArrayData<'static>,
    ) -> Result<(), IsmError> {
        let mut take_ints = |a: Option<ArrayId>| {
            a.map(|a| match exchange(a, ArrayData::I64(Vec::new())) {
                ArrayData::I64(v) => v,
                _ => Vec::new(),
            })
        };
        let pos: Vec<Option<Vec<i64>>> = targets.pos.iter().map(|&a| take_ints(a)).collect();
        let crd: Vec<Option<Vec<i64>>> = targets.crd.iter().map(|&a| take_ints(a)).collect();
        macro_rules! place {
            ($w:expr, $variant:ident) => {{
                let vals = match exchange(targets.vals, ArrayData::I64(Vec::new())) {
                    ArrayData::$variant(v) => v,
                    _ => Vec::new(),
                };
                let mut levels = nm_ism::LevelArrays { pos, crd, vals };
                $w.finish_into(&targets.kinds, &mut levels)?;
                for (l, p) in levels.pos.into_iter().enumerate() {
                    if let (Some(p), Some(a)) = (p, targets.pos[l]) {
                        exchange(a, ArrayData::I64(p));
                    }
                }
                for (l, c) in levels.crd.into_iter().enumerate() {
                    if let (Some(c), Some(a)) = (c, targets.crd[l]) {
                        exchange(a, ArrayData::I64(c));
                    }
                }
                exchange(targets.vals, ArrayData::$variant(levels.vals));
            }};
        }
        match self {
            WorkspaceData::F32(w) => place!(w, F32),
            WorkspaceData::F64(w) => place!(w, F64),
        }
        Ok(())
    }
}

impl Clone for WorkspaceData {
    /// An empty workspace like this one (its contents belong to one run).
    fn clone(&self) -> Self {
        let (extents, config) = self.parts();
        WorkspaceData::new(self.elem(), extents, config).expect("a workspace like one that exists")
    }
}

impl PartialEq for WorkspaceData {
    fn eq(&self, other: &Self) -> bool {
        self.elem() == other.elem() && self.parts() == other.parts()
    }
}

impl std::fmt::Debug for WorkspaceData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (extents, config) = self.parts();
        write!(f, "Workspace({:?}, {extents:?}, {})", self.elem(), config.policy)
    }
}

/// Where a finished workspace goes: the result's `pos`/`crd` per level and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Targets {
    pub(crate) kinds: Vec<LevelKind>,
    pub(crate) pos: Vec<Option<ArrayId>>,
    pub(crate) crd: Vec<Option<ArrayId>>,
    pub(crate) vals: ArrayId,
}

impl Targets {
    /// The result arrays of `f` (its outputs with a tensor role), for workspace `w`.
    pub fn of(f: &Function, w: ArrayId) -> Option<Targets> {
        let Role::Workspace { kinds, .. } = &f.arrays[w].role else { return None };
        let n = kinds.len();
        let (mut pos, mut crd, mut vals) = (vec![None; n], vec![None; n], None);
        for (id, a) in f.arrays.iter() {
            match (&a.role, a.output) {
                (Role::Pos { level, .. }, true) if *level < n => pos[*level] = Some(id),
                (Role::Crd { level, .. }, true) if *level < n => crd[*level] = Some(id),
                (Role::Values { .. }, true) => vals = Some(id),
                _ => {}
            }
        }
        Some(Targets { kinds: kinds.clone(), pos, crd, vals: vals? })
    }
}
