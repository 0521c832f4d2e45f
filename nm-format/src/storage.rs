//! Plain arrays behind each level: index arrays of 32 or 64 bits, packed N:M metadata.

/// An array of positions or coordinates: 32-bit when every entry fits, else 64-bit.
///
/// Built with [`Indices::from_usize`], which picks the narrowest width, or from a `Vec<u32>` /
/// `Vec<u64>` the caller already has (kept as is, no copy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Indices {
    /// 32-bit entries.
    U32(Vec<u32>),
    /// 64-bit entries.
    U64(Vec<u64>),
}

impl Indices {
    /// Narrows to 32 bits when the largest entry fits.
    pub fn from_usize(values: Vec<usize>) -> Self {
        if values.iter().all(|&v| v <= u32::MAX as usize) {
            Indices::U32(values.into_iter().map(|v| v as u32).collect())
        } else {
            Indices::U64(values.into_iter().map(|v| v as u64).collect())
        }
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.view().len()
    }

    /// Where its entries start, for placing an array read in step with it (see
    /// [`nm_runtime::memory::place_apart`]).
    pub(crate) fn peer(&self) -> nm_runtime::memory::Peer {
        match self {
            Indices::U32(v) => nm_runtime::memory::Peer::of(v),
            Indices::U64(v) => nm_runtime::memory::Peer::of(v),
        }
    }

    /// Whether there are no entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`. Panics when `i` is out of bounds, like slice indexing.
    #[inline]
    pub fn get(&self, i: usize) -> usize {
        self.view().get(i)
    }

    /// All entries widened to `usize`.
    pub fn to_usize(&self) -> Vec<usize> {
        match self {
            Indices::U32(v) => v.iter().map(|&x| x as usize).collect(),
            Indices::U64(v) => v.iter().map(|&x| x as usize).collect(),
        }
    }

    /// Bytes per entry (4 or 8), for code that hands the array to a kernel.
    pub fn width(&self) -> usize {
        self.view().width()
    }
}

impl Indices {
    /// The entries, borrowed.
    #[inline]
    pub fn view(&self) -> IndicesView<'_> {
        match self {
            Indices::U32(v) => IndicesView::U32(v),
            Indices::U64(v) => IndicesView::U64(v),
        }
    }
}

/// Borrowed positions or coordinates: an [`Indices`] someone else owns (a `Vec` of ours, or
/// an array of another library read in place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndicesView<'a> {
    /// 32-bit entries.
    U32(&'a [u32]),
    /// 64-bit entries.
    U64(&'a [u64]),
}

impl IndicesView<'_> {
    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            IndicesView::U32(v) => v.len(),
            IndicesView::U64(v) => v.len(),
        }
    }

    /// Whether there are no entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`. Panics when `i` is out of bounds, like slice indexing.
    #[inline]
    pub fn get(&self, i: usize) -> usize {
        match self {
            IndicesView::U32(v) => v[i] as usize,
            IndicesView::U64(v) => v[i] as usize,
        }
    }

    /// Bytes per entry (4 or 8).
    pub fn width(&self) -> usize {
        match self {
            IndicesView::U32(_) => 4,
            IndicesView::U64(_) => 8,
        }
    }

    /// An owned copy.
    pub fn to_indices(&self) -> Indices {
        match self {
            IndicesView::U32(v) => Indices::U32(v.to_vec()),
            IndicesView::U64(v) => Indices::U64(v.to_vec()),
        }
    }
}

impl From<Vec<u32>> for Indices {
    fn from(v: Vec<u32>) -> Self {
        Indices::U32(v)
    }
}

impl From<Vec<u64>> for Indices {
    fn from(v: Vec<u64>) -> Self {
        Indices::U64(v)
    }
}

/// N:M metadata: the offset of each kept entry inside its block of `M`, packed in
/// ⌈log2 M⌉ bits per entry (2 bits for 2:4, 3 for 2:8), little-endian within 64-bit words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    bits: u32,
    len: usize,
    words: Vec<u64>,
}

impl Metadata {
    /// Packs offsets for blocks of `m`. Entries are masked to the bit width, so validate them
    /// (`< m`) first; [`Tensor::from_raw`](crate::Tensor::from_raw) does.
    pub fn pack(offsets: &[u16], m: u32) -> Self {
        let mut meta = Self::zeroed(offsets.len(), m);
        for (i, &v) in offsets.iter().enumerate() {
            meta.set(i, v as u32);
        }
        meta
    }

    /// `len` entries, all zero.
    pub fn zeroed(len: usize, m: u32) -> Self {
        let bits = crate::level::metadata_bits(m);
        let words = (len * bits as usize).div_ceil(64);
        Self { bits, len, words: vec![0; words] }
    }

    /// Bits per entry.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The packed words, for kernels that unpack metadata themselves.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Entry `i`. Panics when `i >= len`.
    #[inline]
    pub fn get(&self, i: usize) -> u32 {
        assert!(i < self.len, "metadata index {i} out of range 0..{}", self.len);
        if self.bits == 0 {
            return 0;
        }
        let bit = i * self.bits as usize;
        let (word, shift) = (bit / 64, bit % 64);
        let mask = (1u64 << self.bits) - 1;
        let mut v = self.words[word] >> shift;
        if shift + self.bits as usize > 64 {
            v |= self.words[word + 1] << (64 - shift);
        }
        (v & mask) as u32
    }

    /// Sets entry `i` to the low `bits` of `value`. Panics when `i >= len`.
    #[inline]
    pub fn set(&mut self, i: usize, value: u32) {
        assert!(i < self.len, "metadata index {i} out of range 0..{}", self.len);
        if self.bits == 0 {
            return;
        }
        let bit = i * self.bits as usize;
        let (word, shift) = (bit / 64, bit % 64);
        let mask = (1u64 << self.bits) - 1;
        let v = value as u64 & mask;
        self.words[word] = (self.words[word] & !(mask << shift)) | (v << shift);
        if shift + self.bits as usize > 64 {
            let high = 64 - shift;
            self.words[word + 1] = (self.words[word + 1] & !(mask >> high)) | (v >> high);
        }
    }

    /// All entries, unpacked.
    pub fn unpack(&self) -> Vec<u16> {
        (0..self.len).map(|i| self.get(i) as u16).collect()
    }
}

/// The arrays of one level of a tensor, matching its [`LevelKind`](crate::LevelKind).
#[derive(Clone, Debug, PartialEq)]
pub enum LevelStorage {
    /// A dense level of `size` coordinates.
    Dense {
        /// Coordinates per parent position.
        size: usize,
    },
    /// A compressed level.
    Compressed {
        /// `pos[p]..pos[p+1]` are the positions below parent position `p`.
        pos: Indices,
        /// The coordinate of each position.
        crd: Indices,
    },
    /// A singleton level: one coordinate per parent position.
    Singleton {
        /// The coordinate of each position.
        crd: Indices,
    },
    /// A structured N:M level.
    Structured {
        /// Coordinates per parent position (a multiple of M).
        size: usize,
        /// The kept offsets inside each block.
        meta: Metadata,
    },
    /// A band level.
    Band {
        /// `pos[p]..pos[p+1]` are the positions below parent position `p`.
        pos: Indices,
        /// The coordinate of each parent's first position (`first[p] + k` is position
        /// `pos[p] + k`'s).
        first: Indices,
    },
}

impl LevelStorage {
    /// A short name of the storage kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        self.view().kind_name()
    }

    /// The arrays, borrowed.
    pub fn view(&self) -> LevelView<'_> {
        match self {
            LevelStorage::Dense { size } => LevelView::Dense { size: *size },
            LevelStorage::Compressed { pos, crd } => LevelView::Compressed { pos: pos.view(), crd: crd.view() },
            LevelStorage::Singleton { crd } => LevelView::Singleton { crd: crd.view() },
            LevelStorage::Structured { size, meta } => LevelView::Structured { size: *size, meta },
            LevelStorage::Band { pos, first } => LevelView::Band { pos: pos.view(), first: first.view() },
        }
    }
}

/// One level's arrays, borrowed: what [`TensorView`](crate::TensorView) reads in place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LevelView<'a> {
    /// A dense level of `size` coordinates per parent position.
    Dense {
        /// Coordinates per parent position.
        size: usize,
    },
    /// A compressed level.
    Compressed {
        /// `pos[p]..pos[p+1]` are the positions below parent position `p`.
        pos: IndicesView<'a>,
        /// The coordinate of each position.
        crd: IndicesView<'a>,
    },
    /// A singleton level.
    Singleton {
        /// The coordinate of each position.
        crd: IndicesView<'a>,
    },
    /// A structured N:M level.
    Structured {
        /// Coordinates per parent position (a multiple of M).
        size: usize,
        /// The kept offsets inside each block.
        meta: &'a Metadata,
    },
    /// A band level.
    Band {
        /// `pos[p]..pos[p+1]` are the positions below parent position `p`.
        pos: IndicesView<'a>,
        /// The coordinate of each parent's first position.
        first: IndicesView<'a>,
    },
}

impl LevelView<'_> {
    /// A short name of the storage kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            LevelView::Dense { .. } => "dense",
            LevelView::Compressed { .. } => "compressed",
            LevelView::Singleton { .. } => "singleton",
            LevelView::Structured { .. } => "structured",
            LevelView::Band { .. } => "band",
        }
    }

    /// An owned copy.
    pub fn to_storage(&self) -> LevelStorage {
        match *self {
            LevelView::Dense { size } => LevelStorage::Dense { size },
            LevelView::Compressed { pos, crd } => {
                LevelStorage::Compressed { pos: pos.to_indices(), crd: crd.to_indices() }
            }
            LevelView::Singleton { crd } => LevelStorage::Singleton { crd: crd.to_indices() },
            LevelView::Structured { size, meta } => LevelStorage::Structured { size, meta: meta.clone() },
            LevelView::Band { pos, first } => LevelStorage::Band { pos: pos.to_indices(), first: first.to_indices() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_packs_across_word_boundaries() {
        for m in [2u32, 4, 8, 16, 32, 100, 65536] {
            let offsets: Vec<u16> = (0..1000u32).map(|i| ((i * 7 + 3) % m) as u16).collect();
            let meta = Metadata::pack(&offsets, m);
            assert_eq!(meta.unpack(), offsets, "m = {m}");
            assert_eq!(meta.bits(), crate::level::metadata_bits(m));
        }
        assert_eq!(crate::level::metadata_bits(4), 2);
        assert_eq!(crate::level::metadata_bits(8), 3);
        assert_eq!(crate::level::metadata_bits(1), 0);
        assert_eq!(Metadata::pack(&[0, 0], 1).unpack(), vec![0, 0]);
    }

    #[test]
    fn indices_pick_the_narrowest_width() {
        assert_eq!(Indices::from_usize(vec![1, 2, u32::MAX as usize]).width(), 4);
        assert_eq!(Indices::from_usize(vec![u32::MAX as usize + 1]).width(), 8);
    }
}
