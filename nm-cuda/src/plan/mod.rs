//! Choosing a kernel for a shape and a sparsity, and the index tables it reads, computed once
//! per B on the host ("offline" in the NM-SpMM paper).

use nm_format::NmParts;

use crate::error::{CudaError, Result};

/// The NM-SpMM kernel versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// Hierarchical blocking: shared-memory tiles, warp tiles, thread tiles; A's whole tile loaded.
    V1,
    /// V1 plus sparsity-aware loading: at high sparsity only the columns of A that the
    /// block's windows keep are loaded (packed by `col_info`).
    V2,
    /// V2 plus the double-buffered pipeline (cp.async of the next tiles while computing).
    V3,
}

impl std::str::FromStr for Version {
    type Err = CudaError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "v1" | "1" => Ok(Version::V1),
            "v2" | "2" => Ok(Version::V2),
            "v3" | "3" => Ok(Version::V3),
            _ => Err(CudaError::Unsupported(format!("unknown kernel version `{s}` (v1, v2 or v3)"))),
        }
    }
}

/// The paper's small/medium/large parameter sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileSize {
    /// 32×64 blocks of 64 threads, for small outputs.
    Small,
    /// 64×128 blocks of 128 threads.
    Medium,
    /// 128×128 blocks of 256 threads.
    Large,
}

/// Block, warp and thread tiles of C: `ms×ns` per block, `mr×nr` per warp, `mt×nt` per thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tile {
    /// Block rows.
    pub ms: usize,
    /// Block columns.
    pub ns: usize,
    /// Warp rows.
    pub mr: usize,
    /// Warp columns.
    pub nr: usize,
    /// Thread rows.
    pub mt: usize,
    /// Thread columns.
    pub nt: usize,
}

impl TileSize {
    /// The tile of this parameter set.
    pub fn tile(self) -> Tile {
        match self {
            TileSize::Small => Tile { ms: 32, ns: 64, mr: 32, nr: 32, mt: 4, nt: 8 },
            TileSize::Medium => Tile { ms: 64, ns: 128, mr: 64, nr: 32, mt: 8, nt: 8 },
            TileSize::Large => Tile { ms: 128, ns: 128, mr: 64, nr: 32, mt: 8, nt: 8 },
        }
    }
}

impl Tile {
    /// Threads per block.
    pub fn threads(&self) -> usize {
        (self.ms / self.mt) * (self.ns / self.nt)
    }
}

/// What the caller may fix; everything left `None` is chosen by shape and sparsity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Kernel version.
    pub version: Option<Version>,
    /// Parameter set.
    pub tile: Option<TileSize>,
    /// Split-K slices (1 = none).
    pub slices: Option<usize>,
}

/// What the device offers that the choice depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Streaming multiprocessors.
    pub sms: usize,
    /// Compute capability (major, minor).
    pub cc: (u32, u32),
    /// Largest dynamic shared memory one block may opt in to, bytes.
    pub smem_optin: usize,
}

impl DeviceLimits {
    /// An H100 SXM (sm_90): what the compile check and the tests without a GPU plan for.
    pub const H100: DeviceLimits = DeviceLimits { sms: 132, cc: (9, 0), smem_optin: 227 * 1024 };
    /// An A100 (sm_80).
    pub const A100: DeviceLimits = DeviceLimits { sms: 108, cc: (8, 0), smem_optin: 163 * 1024 };
}

/// Sparsity above which the packed (sparsity-aware) A loading is used: the NM-SpMM paper's
/// crossover on an A100 (between 62.5% and 75%), kept for the small and medium tiles, where
/// an H100 agrees (packing was faster at 2:8 in the small tile; BENCHMARKS.md, "N:M on the
/// GPU").
pub const PACK_ABOVE: f64 = 0.7;

/// The same for the large tile (256 threads, two blocks per SM), measured on an H100: at 2:8
/// packing lost a little at both shapes measured, at 1:8 it won by a third.
pub const PACK_ABOVE_LARGE: f64 = 0.8;

/// One f32 kernel variant: everything its NVRTC `-D` options fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct F32Kernel {
    /// Version it implements.
    pub version: Version,
    /// Tiles.
    pub tile: Tile,
    /// Dense k per step (whole windows).
    pub ks: usize,
    /// Kept rows per step, `ks·N/M`.
    pub ws: usize,
    /// Rows of the A tile in shared memory.
    pub arows: usize,
    /// Column groups one block can touch.
    pub gmax: usize,
    /// Only kept columns of A are loaded.
    pub packed: bool,
    /// cp.async double buffering.
    pub pipeline: bool,
    /// Blocks per SM the registers must allow (`__launch_bounds__`'s second argument).
    pub min_blocks: usize,
    /// A's rows load as float4 (k % 4 == 0, not packed).
    pub vec_a: bool,
    /// N, M, L.
    pub nm: (usize, usize, usize),
}

/// Groups of `l` columns that `ns` consecutive columns starting at a multiple of `ns` can touch.
pub fn groups_per_block(ns: usize, l: usize) -> usize {
    if ns.is_multiple_of(l) {
        ns / l
    } else if l.is_multiple_of(ns) {
        1
    } else {
        ns / l + 2
    }
}

impl F32Kernel {
    /// The variant for `version` and `tile` on an `(N, M, L)` operand with `k` rows.
    pub fn new(version: Version, tile: Tile, nm: (usize, usize, usize), k: usize) -> F32Kernel {
        let (n, m, l) = nm;
        let sparsity = 1.0 - n as f64 / m as f64;
        let pack_above = if tile.threads() >= 256 { PACK_ABOVE_LARGE } else { PACK_ABOVE };
        let packed = version != Version::V1 && sparsity > pack_above;
        // Windows per step: about 16 kept rows (32 when packed, since only kept columns of A
        // occupy shared memory), while the dense k of a step stays ≤ 64 (128 packed).
        let (k_cap, w_cap) = if packed { (128, 32) } else { (64, 16) };
        let windows = (k_cap / m).min((w_cap / n).max(1)).max(1);
        let (ks, ws) = (windows * m, windows * n);
        let gmax = groups_per_block(tile.ns, l);
        let arows = if packed { ks.min(ws * gmax) } else { ks };
        F32Kernel {
            version,
            tile,
            ks,
            ws,
            arows,
            gmax,
            packed,
            pipeline: version == Version::V3,
            // Two 256-thread blocks per SM (registers capped at 128) where a warp's columns
            // share one group: faster than one at every pattern on an H100 (examples/tune.rs,
            // BENCHMARKS.md, "N:M on the GPU"). With a group per column or per float4 the
            // outer product needs more registers and spills at 128.
            min_blocks: if tile.threads() >= 256 && l.is_multiple_of(tile.nr) && tile.ns.is_multiple_of(l) {
                2
            } else {
                1
            },
            vec_a: !packed && ks.is_multiple_of(4) && k.is_multiple_of(4),
            nm,
        }
    }

    /// The NVRTC `-D` options.
    pub fn defines(&self) -> Vec<String> {
        let t = &self.tile;
        [
            ("MS", t.ms),
            ("NS", t.ns),
            ("MR", t.mr),
            ("NR", t.nr),
            ("MT", t.mt),
            ("NT", t.nt),
            ("KS", self.ks),
            ("WS", self.ws),
            ("AROWS", self.arows),
            ("GMAX", self.gmax),
            ("PACKED", self.packed as usize),
            ("PIPELINE", self.pipeline as usize),
            ("VEC_A", self.vec_a as usize),
            ("MIN_BLOCKS", self.min_blocks),
            ("NM_L", self.nm.2),
        ]
        .iter()
        .map(|(k, v)| format!("-D{k}={v}"))
        .collect()
    }

    /// Dynamic shared memory per block, bytes.
    pub fn shared_bytes(&self) -> usize {
        // As in the kernel: A tile rows padded by 4, the index tile rounded up to 4 ints.
        let one = self.arows * (self.tile.ms + 4) + self.ws * self.tile.ns + (self.ws * self.gmax).div_ceil(4) * 4;
        4 * one * if self.pipeline { 2 } else { 1 }
    }

    /// Steps of `ks` along k for a B of `w` kept rows.
    pub fn steps(&self, w: usize) -> usize {
        w.div_ceil(self.ws)
    }
}

/// A chosen f32 launch: the kernel and its grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F32Plan {
    /// The kernel variant.
    pub kernel: F32Kernel,
    /// The parameter set it came from.
    pub size: TileSize,
    /// Split-K slices.
    pub slices: usize,
    /// Steps per slice.
    pub steps_per_slice: usize,
    /// Blocks along n, m, and slices.
    pub grid: (usize, usize, usize),
}

fn blocks(tile: &Tile, m: usize, n: usize) -> usize {
    m.div_ceil(tile.ms) * n.div_ceil(tile.ns)
}

/// The f32 kernel for `C (m×n) = A (m×k) · B` with B in `nm(N,M,L)`, by shape and sparsity:
/// the largest parameter set that still gives every SM a block, V3 where cp.async exists
/// (sm_80+) except V1 for the large tile's whole (unpacked) A tiles at 75%, packing above
/// [`PACK_ABOVE`] ([`PACK_ABOVE_LARGE`] in the large tile), split-K when the grid cannot fill
/// the device.
pub fn plan_f32(
    m: usize,
    n: usize,
    k: usize,
    nm: (usize, usize, usize),
    limits: DeviceLimits,
    options: Options,
) -> Result<F32Plan> {
    if m == 0 || n == 0 || k == 0 {
        return Err(CudaError::Unsupported(format!("empty product {m}×{k} · {k}×{n}")));
    }
    if m > i32::MAX as usize || n > i32::MAX as usize || k > i32::MAX as usize {
        return Err(CudaError::Unsupported(format!("{m}×{k} · {k}×{n}: dimensions beyond 2^31 are not supported")));
    }
    let has_cp_async = limits.cc.0 >= 8;
    let size = options.tile.unwrap_or_else(|| {
        [TileSize::Large, TileSize::Medium]
            .into_iter()
            .find(|s| blocks(&s.tile(), m, n) >= limits.sms)
            .unwrap_or(TileSize::Small)
    });
    let sparsity = 1.0 - nm.0 as f64 / nm.1 as f64;
    let version = options.version.unwrap_or(if !has_cp_async {
        Version::V2
    } else if size == TileSize::Large && sparsity > PACK_ABOVE && sparsity <= PACK_ABOVE_LARGE {
        // The large tile's whole A tile at high sparsity: measured on an H100, V1 beat V3 at
        // 2:8 on nearly every shape that chooses this tile and at 1:4, while V3 won at 3:8 and
        // 4:8 (BENCHMARKS.md, "V1 for the large tile").
        Version::V1
    } else {
        Version::V3
    });
    if version == Version::V3 && !has_cp_async {
        return Err(CudaError::Unsupported(format!(
            "V3 needs cp.async (sm_80 or newer); this device is sm_{}{}",
            limits.cc.0, limits.cc.1
        )));
    }
    plan_kernel(F32Kernel::new(version, size.tile(), nm, k), size, m, n, k, limits, options.slices)
}

/// The launch of a given f32 variant (from `size`'s tile, perhaps with other steps or bounds):
/// its grid and split-K, after checking it fits the device's shared memory.
pub fn plan_kernel(
    kernel: F32Kernel,
    size: TileSize,
    m: usize,
    n: usize,
    k: usize,
    limits: DeviceLimits,
    slices: Option<usize>,
) -> Result<F32Plan> {
    let (version, nm) = (kernel.version, kernel.nm);
    if kernel.shared_bytes() > limits.smem_optin {
        return Err(CudaError::Unsupported(format!(
            "{version:?} with {size:?} tiles needs {} bytes of shared memory per block for M = {}; the device \
             allows {} (choose a smaller tile or V1/V2)",
            kernel.shared_bytes(),
            nm.1,
            limits.smem_optin
        )));
    }
    let w = k.div_ceil(nm.1) * nm.0;
    let steps = kernel.steps(w);
    let grid_blocks = blocks(&kernel.tile, m, n);
    let (slices, steps_per_slice) = split_k(slices, grid_blocks, steps, limits.sms);
    Ok(F32Plan {
        kernel,
        size,
        slices,
        steps_per_slice,
        grid: (n.div_ceil(kernel.tile.ns), m.div_ceil(kernel.tile.ms), slices),
    })
}

/// Split-K slices and steps per slice: `asked`, else enough slices for a grid of
/// `grid_blocks` to give every SM a block (each slice keeping 4 steps at least); never an
/// empty slice.
pub fn split_k(asked: Option<usize>, grid_blocks: usize, steps: usize, sms: usize) -> (usize, usize) {
    let slices = asked
        .unwrap_or_else(|| if grid_blocks >= sms { 1 } else { sms.div_ceil(grid_blocks).min(steps / 4) })
        .clamp(1, steps.max(1));
    let steps_per_slice = steps.div_ceil(slices).max(1);
    (steps.div_ceil(steps_per_slice).max(1), steps_per_slice)
}

/// The index tables of one f32 kernel variant for one B (see `kernels/nm_spmm_f32.cu`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tables {
    /// `dtab[(bx·W + r)·GMAX + s]`: the A-tile row kept row `r` reads for group slot `s` of
    /// block column `bx`.
    pub dtab: Vec<i32>,
    /// `col_info[(bx·steps + c)·AROWS + p]`: the step-relative k of packed row `p`, or -1
    /// (empty unless packed).
    pub col_info: Vec<i32>,
}

/// Builds the tables of `kernel` for `b`: D re-expressed per block column relative to each
/// step and, when packing, reordered to the positions of the step's kept columns.
pub fn tables(kernel: &F32Kernel, b: &NmParts<f32>) -> Tables {
    let (keep, win) = (b.n as usize, b.m as usize);
    let (w, groups, l) = (b.rows(), b.groups(), b.l);
    let (ns, gmax, ws) = (kernel.tile.ns, kernel.gmax, kernel.ws);
    let windows_per_step = kernel.ks / win;
    let block_cols = b.shape[1].div_ceil(ns);
    let steps = kernel.steps(w);
    let mut dtab = vec![0i32; block_cols * w * gmax];
    let mut col_info = if kernel.packed { vec![-1i32; block_cols * steps * kernel.arows] } else { Vec::new() };
    // The step-relative k of kept row r in group g.
    let local = |r: usize, g: usize| ((r / keep) % windows_per_step) * win + b.d[r * groups + g] as usize;
    for bx in 0..block_cols {
        let g0 = bx * ns / l;
        let slots = (0..gmax).filter(|s| g0 + s < groups).count();
        for c in 0..steps {
            let rows = c * ws..((c + 1) * ws).min(w);
            if kernel.packed {
                let mut used = vec![false; kernel.ks];
                for r in rows.clone() {
                    for s in 0..slots {
                        used[local(r, g0 + s)] = true;
                    }
                }
                let info = &mut col_info[(bx * steps + c) * kernel.arows..][..kernel.arows];
                let mut position = vec![0i32; kernel.ks];
                for (p, kk) in (0..kernel.ks).filter(|&kk| used[kk]).enumerate() {
                    info[p] = kk as i32;
                    position[kk] = p as i32;
                }
                for r in rows {
                    for s in 0..slots {
                        dtab[(bx * w + r) * gmax + s] = position[local(r, g0 + s)];
                    }
                }
            } else {
                for r in rows {
                    for s in 0..slots {
                        dtab[(bx * w + r) * gmax + s] = local(r, g0 + s) as i32;
                    }
                }
            }
        }
    }
    Tables { dtab, col_info }
}

/// One variant of the bf16 tensor-core kernel (`kernels/nm_spmm_bf16_tc.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bf16Kernel {
    /// Block rows.
    pub ms: usize,
    /// Block columns.
    pub ns: usize,
    /// Warp rows.
    pub wm: usize,
    /// Warp columns.
    pub wn: usize,
    /// Kept rows per pipeline stage (one barrier per stage).
    pub kt: usize,
    /// Shared buffers of the cp.async pipeline.
    pub stages: usize,
    /// Stage A as the windows' dense rows that some group of the block keeps (each copied
    /// once) rather than as every group's own gathered rows; see the kernel's header.
    pub windows: bool,
    /// Blocks per SM the registers are bounded for (`__launch_bounds__`).
    pub min_blocks: usize,
    /// Column groups one block can touch.
    pub gmax: usize,
    /// N, M, L.
    pub nm: (usize, usize, usize),
}

impl Bf16Kernel {
    /// The parameter set `size` for an `(N, M, L)` operand: 64×64 blocks of 4 warps (warp
    /// tiles 32×32), 128×128 of 8 (64×32), 256×128 of 8 (128×32); 32 kept rows per stage.
    /// Warp tiles are 32 columns wide so that at L = 32 (and any multiple) one gathered A
    /// fragment serves all of a warp's n8 tiles. Fit to a device with [`Bf16Kernel::fit`].
    pub fn new(size: TileSize, nm: (usize, usize, usize)) -> Result<Bf16Kernel> {
        let l = nm.2;
        if l == 0 || !l.is_multiple_of(8) {
            return Err(CudaError::Unsupported(format!(
                "the bf16 tensor-core kernel needs L to be a multiple of 8 (an m16n8 tile shares one group); L = {l}"
            )));
        }
        let (ms, ns, wm, wn, stages) = match size {
            TileSize::Small => (64, 64, 32, 32, 4),
            TileSize::Medium => (128, 128, 64, 32, 3),
            TileSize::Large => (256, 128, 128, 32, 2),
        };
        Ok(Bf16Kernel {
            ms,
            ns,
            wm,
            wn,
            kt: 32,
            stages,
            windows: false,
            min_blocks: 1,
            gmax: groups_per_block(ns, l),
            nm,
        })
    }

    /// This variant staging A by windows, with whole windows per stage: the kept rows per
    /// stage a multiple of 16 and of N, at least 16 and enough for 128 dense rows.
    pub fn windowed(self) -> Bf16Kernel {
        let (n, m, _) = self.nm;
        let unit = 16 * n / gcd(16, n);
        let kt = (128 * n / m).max(16).next_multiple_of(unit);
        Bf16Kernel { windows: true, kt, ..self }
    }

    /// Dense k rows per stage (WINDOWS), or 0.
    pub fn span(&self) -> usize {
        if self.windows { self.kt / self.nm.0 * self.nm.1 } else { 0 }
    }

    /// This variant with fewer stages, then fewer kept rows per stage, until it fits
    /// `limits`' shared memory; an error if even two stages of 16 rows do not (many groups
    /// per block: a small L).
    pub fn fit(mut self, limits: DeviceLimits) -> Result<Bf16Kernel> {
        while self.shared_bytes() > limits.smem_optin {
            if self.stages > 2 {
                self.stages -= 1;
            } else if self.kt > 16 && !self.windows {
                self.kt /= 2;
            } else {
                return Err(CudaError::Unsupported(format!(
                    "{self:?} needs {} bytes of shared memory per block; the device allows {}",
                    self.shared_bytes(),
                    limits.smem_optin
                )));
            }
        }
        Ok(self)
    }

    /// The variant for an `m×n` product, from the tuning sweep on an H100 over three shapes
    /// and three patterns at L = 32 (BENCHMARKS.md, "N:M on the GPU"). Where more than a
    /// quarter of the rows are kept, A staged by windows in 128×256 blocks of 16 warps (much
    /// faster there than the best per-group variant): a block's 8 groups share most rows. At a
    /// quarter or less, per group: 128×128 blocks of two stages, two blocks per SM (faster than
    /// windows and than 64×64 blocks), or 64×64 blocks where the grid gives fewer 128×128
    /// blocks than SMs (faster for the smallest shape). Where L is not a
    /// multiple of 32, the windows go in 128×128 blocks of 8 warps. Windows only where a block
    /// spans several groups: with one there is no row to share (and the 128×256 block of one
    /// group spills registers). Fitted to the device; the smallest tile where nothing else fits.
    pub fn choose(m: usize, n: usize, nm: (usize, usize, usize), limits: DeviceLimits) -> Result<Bf16Kernel> {
        let (medium, small) = (Self::new(TileSize::Medium, nm)?, Self::new(TileSize::Small, nm)?);
        let dense_enough = 4 * nm.0 > nm.1;
        let shares_rows = |ns: usize| groups_per_block(ns, nm.2) > 1;
        let preferred = if dense_enough && nm.2.is_multiple_of(32) && shares_rows(256) {
            Bf16Kernel { ns: 256, gmax: groups_per_block(256, nm.2), wm: 64, ..medium }.windowed()
        } else if dense_enough && shares_rows(medium.ns) {
            // Warps whose n8 tiles lie in several groups need more registers than 16 warps have.
            medium.windowed()
        } else if medium.blocks(m, n) >= limits.sms {
            Bf16Kernel { stages: 2, min_blocks: 2, ..medium }
        } else {
            small
        };
        preferred.fit(limits).or_else(|_| small.fit(limits))
    }

    /// The variants a tuning sweep times (`examples/tune.rs`; precompiled for a GPU session by
    /// `examples/precompile.rs`): the three tiles, more stages or kept rows per stage, two
    /// blocks per SM, 16 warps in the large tile, and a 128×256 tile. Not fitted to a device.
    pub fn tuning_set(nm: (usize, usize, usize)) -> Result<Vec<Bf16Kernel>> {
        let (small, medium, large) =
            (Self::new(TileSize::Small, nm)?, Self::new(TileSize::Medium, nm)?, Self::new(TileSize::Large, nm)?);
        Ok(vec![
            small,
            medium,
            Bf16Kernel { stages: 4, ..medium },
            Bf16Kernel { kt: 64, stages: 2, ..medium },
            Bf16Kernel { stages: 2, min_blocks: 2, ..medium },
            large,
            Bf16Kernel { kt: 16, stages: 4, ..large },
            Bf16Kernel { wm: 64, ..large },
            Bf16Kernel { ns: 256, gmax: groups_per_block(256, nm.2), wm: 64, stages: 2, ..medium },
            medium.windowed(),
            Bf16Kernel { stages: 2, ..medium.windowed() },
            large.windowed(),
            Bf16Kernel { ns: 256, gmax: groups_per_block(256, nm.2), wm: 64, ..medium.windowed() },
            Bf16Kernel { ns: 256, gmax: groups_per_block(256, nm.2), wm: 128, ..medium.windowed() },
        ])
    }

    /// Blocks of the grid for an `m×n` product (one split-K slice).
    pub fn blocks(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.ms) * n.div_ceil(self.ns)
    }

    /// Dynamic shared memory, bytes: per stage, A's rows ((SPAN + 1)×(MS+8) by windows, with
    /// a KT×GMAX table of rows; else every group slot's KT×(MS+8)) and B′'s KT×(NS+8), bf16.
    pub fn shared_bytes(&self) -> usize {
        let a = if self.windows {
            (self.span() + 1) * (self.ms + 8) + self.kt * self.gmax
        } else {
            self.gmax * self.kt * (self.ms + 8)
        };
        self.stages * 2 * (a + self.kt * (self.ns + 8))
    }

    /// Threads per block.
    pub fn threads(&self) -> usize {
        (self.ms / self.wm) * (self.ns / self.wn) * 32
    }

    /// The NVRTC `-D` options.
    pub fn defines(&self) -> Vec<String> {
        [
            ("MS", self.ms),
            ("NS", self.ns),
            ("WM", self.wm),
            ("WN", self.wn),
            ("KT", self.kt),
            ("STAGES", self.stages),
            ("WINDOWS", self.windows as usize),
            ("MIN_BLOCKS", self.min_blocks),
            ("GMAX", self.gmax),
            ("NM_N", self.nm.0),
            ("NM_M", self.nm.1),
            ("NM_L", self.nm.2),
        ]
        .iter()
        .map(|(k, v)| format!("-D{k}={v}"))
        .collect()
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The `need` mask of a window-staged tensor-core `kernel` over an N:M operand with offsets
/// `d` (W×`groups`) and `k` rows: per block column, one bit per k row, set where some group
/// the block's columns touch keeps that row (a row past k never); and its words per block
/// column. Empty (0 words) when the kernel stages A per group.
pub fn need_mask(kernel: &Bf16Kernel, d: &[u16], w: usize, groups: usize, k: usize, n: usize) -> (Vec<u32>, usize) {
    if !kernel.windows {
        return (Vec::new(), 0);
    }
    let (keep, win, l) = kernel.nm;
    let words = (w.div_ceil(kernel.kt) * kernel.span()).div_ceil(32).max(1);
    let columns = n.div_ceil(kernel.ns);
    let mut mask = vec![0u32; columns * words];
    for (bx, col) in mask.chunks_exact_mut(words).enumerate() {
        let g0 = bx * kernel.ns / l;
        for r in 0..w {
            for grp in (g0..g0 + kernel.gmax).filter(|&g| g < groups) {
                let kk = (r / keep) * win + d[r * groups + grp] as usize;
                if kk < k {
                    col[kk / 32] |= 1 << (kk % 32);
                }
            }
        }
    }
    (mask, words)
}

/// One variant of the 2:4 sparse tensor-core kernel (`kernels/nv24_spmm_sp.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Nv24Kernel {
    /// Block rows.
    pub ms: usize,
    /// Block columns.
    pub ns: usize,
    /// Warp rows.
    pub wm: usize,
    /// Warp columns.
    pub wn: usize,
    /// k32 slices per pipeline stage (one barrier per stage).
    pub kstep: usize,
    /// Shared buffers of the cp.async pipeline.
    pub stages: usize,
}

impl Nv24Kernel {
    /// The parameter set `size`: 64×64 blocks of 4 warps (warp tiles 32×32), 128×128 of 8
    /// (64×32), 256×128 of 8 (64×64); three stages of four k32 slices each. Measured on an
    /// H100 (BENCHMARKS.md, "N:M on the GPU"): one k32 slice per stage spent a barrier on every
    /// 16 mma.sp and ran at half the speed of four slices; the 256×128 tile with 64×64 warp
    /// tiles was faster still.
    pub fn new(size: TileSize) -> Nv24Kernel {
        let (ms, ns, wm, wn) = match size {
            TileSize::Small => (64, 64, 32, 32),
            TileSize::Medium => (128, 128, 64, 32),
            TileSize::Large => (256, 128, 64, 64),
        };
        Nv24Kernel { ms, ns, wm, wn, kstep: 4, stages: 3 }
    }

    /// This variant with stages of fewer k32 slices until it fits `limits`' shared memory
    /// (the 256×128 tile's 222 KiB fit an H100, not an A100's 163 KiB).
    pub fn fit(mut self, limits: DeviceLimits) -> Nv24Kernel {
        while self.shared_bytes() > limits.smem_optin && self.kstep > 1 {
            self.kstep /= 2;
        }
        self
    }

    /// The largest parameter set whose grid for an `m×n` product still gives every SM a block,
    /// fitted to the device's shared memory.
    pub fn choose(m: usize, n: usize, limits: DeviceLimits) -> Nv24Kernel {
        [TileSize::Large, TileSize::Medium]
            .into_iter()
            .map(Nv24Kernel::new)
            .find(|k| k.blocks(m, n) >= limits.sms)
            .unwrap_or(Nv24Kernel::new(TileSize::Small))
            .fit(limits)
    }

    /// Blocks of the grid for an `m×n` product (one split-K slice).
    pub fn blocks(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.ms) * n.div_ceil(self.ns)
    }

    /// Pipeline stages over `k32_steps` k32 slices.
    pub fn stage_count(&self, k32_steps: usize) -> usize {
        k32_steps.div_ceil(self.kstep)
    }

    /// Dynamic shared memory, bytes: per stage A's MS×(16·KSTEP+8) and B's 32·KSTEP×(NS+8)
    /// bf16, and KSTEP·MS metadata words.
    pub fn shared_bytes(&self) -> usize {
        self.stages
            * (2 * self.ms * (16 * self.kstep + 8) + 2 * 32 * self.kstep * (self.ns + 8) + 4 * self.kstep * self.ms)
    }

    /// Threads per block.
    pub fn threads(&self) -> usize {
        (self.ms / self.wm) * (self.ns / self.wn) * 32
    }

    /// The NVRTC `-D` options.
    pub fn defines(&self) -> Vec<String> {
        [
            ("MS", self.ms),
            ("NS", self.ns),
            ("WM", self.wm),
            ("WN", self.wn),
            ("KSTEP", self.kstep),
            ("STAGES", self.stages),
        ]
        .iter()
        .map(|(k, v)| format!("-D{k}={v}"))
        .collect()
    }
}

#[cfg(test)]
mod tests;
