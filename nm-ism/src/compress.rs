//! Compressing a finished workspace — sorted, unique keys — into a format's levels.

use nm_format::{Format, LevelKind, Tensor, TensorError, Value};

use crate::IsmError;

/// A finished workspace's components: keys sorted ascending and unique, with their values.
#[derive(Clone, Debug, PartialEq)]
pub struct Components<V> {
    pub(crate) layout: crate::KeyLayout,
    pub(crate) keys: Vec<u64>,
    pub(crate) vals: Vec<V>,
}

/// One format's level arrays, as a kernel's result holds them: per level `pos` (compressed)
/// and `crd` (compressed, singleton), then the values.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelArrays<V> {
    /// `pos` of each compressed level.
    pub pos: Vec<Option<Vec<i64>>>,
    /// `crd` of each compressed or singleton level.
    pub crd: Vec<Option<Vec<i64>>>,
    /// The values, one per position of the last level.
    pub vals: Vec<V>,
}

impl<V: Value> Components<V> {
    /// Number of components.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, ascending.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// The values, in key order.
    pub fn values(&self) -> &[V] {
        &self.vals
    }

    /// The coordinates (storage order) of component `i`.
    pub fn coords(&self, i: usize) -> Vec<usize> {
        let mut out = vec![0; self.layout.extents().len()];
        self.layout.decode(self.keys[i], &mut out);
        out
    }

    /// The level arrays of a format whose levels are `kinds`, one per workspace dimension in
    /// order: dense levels anywhere, compressed (unique or not, as COO's first level) and
    /// singleton levels.
    pub fn levels(&self, kinds: &[LevelKind]) -> Result<LevelArrays<V>, IsmError> {
        let mut out = LevelArrays { pos: Vec::new(), crd: Vec::new(), vals: Vec::new() };
        self.levels_into(kinds, &mut out)?;
        Ok(out)
    }

    /// [`Components::levels`] into `out`, reusing the memory of its arrays (a kernel run again
    /// refills last run's vectors instead of page-faulting fresh ones).
    pub fn levels_into(&self, kinds: &[LevelKind], out: &mut LevelArrays<V>) -> Result<(), IsmError> {
        let order = self.layout.extents().len();
        if kinds.len() != order {
            return Err(IsmError::Level(format!("{} levels for {order} workspace dimensions", kinds.len())));
        }
        if let Some(k) = kinds.iter().find(|k| matches!(k, LevelKind::Structured { .. } | LevelKind::Band)) {
            return Err(IsmError::Level(k.to_string()));
        }
        let LevelArrays { pos, crd, vals } = out;
        pos.resize(order, None);
        crd.resize(order, None);
        for l in 0..order {
            let reuse = |a: &mut Option<Vec<i64>>, wanted: bool| {
                if wanted {
                    a.get_or_insert_with(Vec::new).clear();
                } else {
                    *a = None;
                }
            };
            reuse(&mut pos[l], matches!(kinds[l], LevelKind::Compressed(_)));
            reuse(&mut crd[l], !matches!(kinds[l], LevelKind::Dense));
            if let Some(p) = &mut pos[l] {
                p.push(0);
            }
        }
        vals.clear();
        // Dense levels, then one compressed unique level (CSR and its like): positions are the
        // keys' leading coordinates, coordinates their last field.
        let last = order.saturating_sub(1);
        if order >= 1
            && kinds[..last].iter().all(|k| *k == LevelKind::Dense)
            && matches!(kinds[last], LevelKind::Compressed(p) if p.unique)
        {
            let rows: usize = self.layout.extents()[..last].iter().product();
            let (stride, radix) = self.layout.last_field();
            let pos_l = pos[last].as_mut().expect("compressed");
            let crd_l = crd[last].as_mut().expect("compressed");
            pos_l.resize(rows + 1, 0);
            crd_l.reserve(self.keys.len());
            if order == 2 {
                for &key in &self.keys {
                    let (row, col) = self.layout.split2(key);
                    pos_l[row as usize + 1] += 1;
                    crd_l.push(col as i64);
                }
            } else {
                let mut c = vec![0usize; order];
                for &key in &self.keys {
                    self.layout.decode(key, &mut c);
                    let mut row = 0usize;
                    for d in 0..last {
                        row = row * self.layout.extents()[d] + c[d];
                    }
                    pos_l[row + 1] += 1;
                    crd_l.push(((key / stride) % radix) as i64);
                }
            }
            for x in 1..pos_l.len() {
                pos_l[x] += pos_l[x - 1];
            }
            vals.extend_from_slice(&self.vals);
            return Ok(());
        }
        // Positions at each level of the previous component, and its coordinates.
        let mut p = vec![0usize; order];
        let mut prev = vec![0usize; order];
        let mut c = vec![0usize; order];
        for (i, &key) in self.keys.iter().enumerate() {
            self.layout.decode(key, &mut c);
            // A new entry at level l: its parent is new, its coordinate differs, or the level
            // keeps duplicates (COO's first level gets one entry per component).
            let mut new_parent = i == 0;
            let mut parent = 0usize;
            for l in 0..order {
                let differs = i == 0 || prev[l] != c[l];
                match kinds[l] {
                    LevelKind::Dense => {
                        p[l] = parent * self.layout.extents()[l] + c[l];
                        new_parent |= differs;
                    }
                    LevelKind::Compressed(props) => {
                        if new_parent || differs || !props.unique {
                            let pos_l = pos[l].as_mut().expect("compressed");
                            if pos_l.len() < parent + 2 {
                                pos_l.resize(parent + 2, 0);
                            }
                            pos_l[parent + 1] += 1;
                            let crd_l = crd[l].as_mut().expect("compressed");
                            crd_l.push(c[l] as i64);
                            p[l] = crd_l.len() - 1;
                            new_parent = true;
                        }
                    }
                    LevelKind::Singleton(_) => {
                        if new_parent || differs {
                            let crd_l = crd[l].as_mut().expect("singleton");
                            crd_l.push(c[l] as i64);
                            p[l] = crd_l.len() - 1;
                            new_parent = true;
                        }
                    }
                    LevelKind::Structured { .. } | LevelKind::Band => unreachable!("refused above"),
                }
                parent = p[l];
            }
            if vals.len() <= parent {
                vals.resize(parent + 1, V::ZERO);
            }
            vals[parent] += self.vals[i];
            std::mem::swap(&mut prev, &mut c);
        }
        // Every parent position gets its `pos` entry; values cover every position of the last
        // level (dense levels below the last compressed one hold explicit zeros).
        let mut positions = 1usize;
        for l in 0..order {
            match kinds[l] {
                LevelKind::Dense => positions *= self.layout.extents()[l],
                LevelKind::Compressed(_) => {
                    let pos_l = pos[l].as_mut().expect("compressed");
                    pos_l.resize(positions + 1, 0);
                    for x in 1..pos_l.len() {
                        pos_l[x] += pos_l[x - 1];
                    }
                    positions = pos_l[positions] as usize;
                }
                LevelKind::Singleton(_) => {}
                LevelKind::Structured { .. } | LevelKind::Band => unreachable!("refused above"),
            }
        }
        vals.resize(positions, V::ZERO);
        Ok(())
    }

    /// The components as a tensor of `shape` in `format` (any format nm-format holds, mode
    /// orderings and blocked levels included). The workspace's dimensions are the format's
    /// level dimensions in storage order (`format.levels()[l].expr.dim()` for level `l`).
    pub fn to_tensor(&self, shape: &[usize], format: &Format) -> Result<Tensor<V>, TensorError> {
        let dims: Vec<usize> = {
            let mut seen = Vec::new();
            for l in format.levels() {
                let d = l.expr.dim();
                if !seen.contains(&d) {
                    seen.push(d);
                }
            }
            seen
        };
        let mut list = nm_format::CoordinateList::new(shape.to_vec());
        let mut c = vec![0usize; self.layout.extents().len()];
        let mut coords = vec![0usize; shape.len()];
        for (i, &key) in self.keys.iter().enumerate() {
            self.layout.decode(key, &mut c);
            for (level_dim, &d) in dims.iter().enumerate() {
                coords[d] = c[level_dim];
            }
            list.push(&coords, self.vals[i]);
        }
        Tensor::from_coordinates(&list, format, nm_format::Duplicates::Sum)
    }
}
