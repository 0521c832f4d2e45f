//! How coordinates become one 64-bit key.

use crate::{IsmError, Policy};

/// The map from coordinates (storage order) to keys: `key = Σ coords[d] · strides[d]`.
///
/// Sparse policies pack each coordinate into its own bit field (`strides` are powers of two),
/// so that splitting a key into its first coordinate and the rest is a shift and a mask, and
/// a radix sort skips the bits no key uses. A dense workspace indexes an array by key, so its
/// keys are the compact row-major positions (mixed radix: no unused key between rows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    extents: Vec<usize>,
    strides: Vec<u64>,
    /// Per dimension: the range of its field (a power of two when packed).
    radices: Vec<u64>,
    packed: bool,
    /// One past the largest key.
    space: u64,
    /// A dense array's row width (see [`KeyLayout::dense_width`]).
    width: u64,
}

impl KeyLayout {
    /// The layout `policy` uses over `extents`; an error when keys would need more than 63
    /// bits.
    pub fn new(extents: &[usize], policy: Policy) -> Result<KeyLayout, IsmError> {
        let packed = policy != Policy::Dense;
        let too_big = || IsmError::KeySpace { extents: extents.to_vec() };
        let radices: Vec<u64> =
            extents.iter().map(|&e| if packed { (e.max(1) as u64).next_power_of_two() } else { e as u64 }).collect();
        let mut strides = vec![1u64; extents.len()];
        let mut space: u64 = 1;
        for d in (0..extents.len()).rev() {
            strides[d] = space;
            space = space.checked_mul(radices[d]).filter(|&s| s <= 1 << 63).ok_or_else(too_big)?;
        }
        let inner = extents.iter().zip(&strides).skip(1);
        let width = 1 + inner.map(|(&e, &s)| (e.max(1) as u64 - 1) * s).sum::<u64>();
        Ok(KeyLayout { extents: extents.to_vec(), strides, radices, packed, space, width })
    }

    /// The extents.
    pub fn extents(&self) -> &[usize] {
        &self.extents
    }

    /// The stride of each coordinate in a key.
    pub fn strides(&self) -> &[u64] {
        &self.strides
    }

    /// One past the largest key.
    pub fn space(&self) -> u64 {
        self.space
    }

    /// The stride of the first coordinate (1 for a one-dimensional key), and whether keys are
    /// bit-packed.
    pub(crate) fn first(&self) -> (u64, bool) {
        (self.strides.first().copied().unwrap_or(1), self.packed)
    }

    /// The key of `coords`, or an error when one is outside its extent.
    pub fn key(&self, coords: &[usize]) -> Result<u64, IsmError> {
        if coords.len() != self.extents.len() || coords.iter().zip(&self.extents).any(|(c, e)| c >= e) {
            return Err(IsmError::OutOfRange { coords: coords.to_vec(), extents: self.extents.clone() });
        }
        Ok(coords.iter().zip(&self.strides).map(|(&c, &s)| c as u64 * s).sum())
    }

    /// Whether `key` is one some coordinates within the extents make.
    pub fn contains(&self, key: u64) -> bool {
        key < self.space
            && (0..self.extents.len()).all(|d| ((key / self.strides[d]) % self.radices[d]) < self.extents[d] as u64)
    }

    /// A key's first coordinate and the rest of the key (a matrix's two coordinates): a shift
    /// and a mask when bit-packed, one division when not ([`KeyLayout::decode`] takes two per
    /// coordinate). The layout has at least one coordinate.
    #[inline]
    pub(crate) fn split2(&self, key: u64) -> (u64, u64) {
        let stride = self.strides[0];
        if self.packed {
            let shift = stride.trailing_zeros();
            (key >> shift, key & (stride - 1))
        } else {
            let row = key / stride;
            (row, key - row * stride)
        }
    }

    /// Where a dense array holds `key`: row after row (a row per first coordinate) of
    /// [`KeyLayout::dense_width`] elements. A packed layout's rows have keys to the next power
    /// of two that no coordinates make (bcsstk33's 8,738 columns: a row of 16,384 keys), which a
    /// dense array indexed by the key itself would hold, zeroed, and page in: nearly twice the
    /// memory for a matrix's result.
    #[inline]
    pub fn dense_index(&self, key: u64) -> usize {
        if self.dense_gap() == 0 {
            return key as usize;
        }
        // A gap means two coordinates or more.
        let (row, rest) = self.split2(key);
        (row * self.width + rest) as usize
    }

    /// The key a dense array holds at `index` ([`KeyLayout::dense_index`] undone).
    #[inline]
    pub(crate) fn dense_key(&self, index: usize) -> u64 {
        let index = index as u64;
        index + index / self.dense_width() * self.dense_gap()
    }

    /// Elements of a dense array's row: one past the largest key within a first coordinate's
    /// (its stride, unless packing left keys unused at its end).
    #[inline]
    pub fn dense_width(&self) -> u64 {
        self.width
    }

    /// The keys a row of keys has past a dense array's row: what [`KeyLayout::dense_index`]
    /// takes off per first coordinate (0 unless packed).
    #[inline]
    pub fn dense_gap(&self) -> u64 {
        self.strides.first().map_or(0, |&s| s - self.width.min(s))
    }

    /// Elements of a dense array over every key.
    pub fn dense_len(&self) -> u64 {
        self.extents.first().map_or(1, |&e| e as u64) * self.dense_width()
    }

    /// The stride and range of the last coordinate's field.
    pub(crate) fn last_field(&self) -> (u64, u64) {
        (self.strides.last().copied().unwrap_or(1), self.radices.last().copied().unwrap_or(1))
    }

    /// The coordinates of `key`.
    #[inline]
    pub fn decode(&self, key: u64, out: &mut [usize]) {
        for d in 0..self.extents.len() {
            out[d] = if self.packed {
                ((key >> self.strides[d].trailing_zeros()) & (self.radices[d] - 1)) as usize
            } else {
                ((key / self.strides[d]) % self.radices[d]) as usize
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KeyLayout;
    use crate::Policy;

    /// A dense array's indices cover the coordinates' keys once each, in key order, within
    /// `dense_len`, and take them back; unpacked layouts index by the key itself.
    #[test]
    fn dense_indices_are_the_keys_in_order_without_the_unused_ones() {
        for extents in [vec![5, 10], vec![3, 4, 5], vec![7], vec![6, 1], vec![4, 16], vec![2, 0]] {
            for policy in [Policy::Bucket, Policy::Dense] {
                let layout = KeyLayout::new(&extents, policy).unwrap();
                let mut coords = vec![0; extents.len()];
                let mut last = None;
                let count: usize = extents.iter().product();
                for n in 0..count {
                    let mut rest = n;
                    for d in (0..extents.len()).rev() {
                        coords[d] = rest % extents[d];
                        rest /= extents[d];
                    }
                    let key = layout.key(&coords).unwrap();
                    let at = layout.dense_index(key);
                    assert!((at as u64) < layout.dense_len(), "{extents:?} {policy:?}: {coords:?} at {at}");
                    assert!(last.is_none_or(|l| l < at), "{extents:?} {policy:?}: {coords:?} out of order");
                    assert_eq!(layout.dense_key(at), key, "{extents:?} {policy:?}");
                    if policy == Policy::Dense {
                        assert_eq!(at as u64, key);
                    }
                    last = Some(at);
                }
            }
        }
        let matrix = KeyLayout::new(&[8738, 8738], Policy::Auto).unwrap();
        assert_eq!((matrix.strides()[0], matrix.dense_width(), matrix.dense_gap()), (16384, 8738, 16384 - 8738));
        assert_eq!(matrix.dense_len(), 8738 * 8738);
    }
}
