//! Random differential testing: random statements (2–3 operands of order 1–3 over `i, j, k, l`,
//! `+ - *` mixes, reductions where a variable is not in the result, a constant now and then,
//! compound subscripts — `i+k`, `2*j+l+1`, `k+2` — on a quarter of the operands' dimensions),
//! an eighth of the statements with at least two dimensions on the first operand read it again
//! in the reverse order (`B(i,j) + B(j,i)`, through a view),
//! random formats per tensor (dense, sparse, non-unique and band vectors, CSR, DCSR, CSC, DCSC,
//! COO, band rows and columns, dense rows under a compressed level, nv24, nm(2,4,2), nm(3,8,4),
//! BCSR, element-wise 1:4 and row-blocked formats written as maps, CSF and other order-3 mixes;
//! dense or sparse results), random sizes (1–6), densities (empty, sparse, full),
//! thread counts (1, 2) and value types (every fourth case in f32), run on the interpreter and
//! the C back end and compared with the independent dense reference — exactly, the data being small integers. A statement the lowering refuses by name is counted
//! and skipped; anything else that fails is a failure, and at least 40% of the cases must
//! compile.
//!
//! About half the cases carry a random schedule (see `random_schedule`): a loop order
//! (`reorder`), a `split`, `fuse`, `pos`, `parallelize` (CPU threads or vector lanes, with
//! every race strategy: `atomics`, `temporary`, `parallel_reduction` on non-result loops),
//! `unroll`, `bound`, `precompute`; an illegal one, or one the lowering refuses by name,
//! counts as refused. A tenth of the operands after the first are of order 4. A
//! failing case is shrunk (sizes, threads, schedule, workspace, densities) while it still
//! fails, and both it and the shrunk one are printed.
//! Sparse results come in CSR, DCSR, CSC and COO (matrices) and sparse vectors; a third of the
//! cases name a random sparse workspace policy (every policy, accumulation arrays of 1–9
//! components, inline or pipelined), used wherever the loops scatter into a sparse result.
//!
//! The bounded run here is 300 cases from a fixed seed; `NMSPARSE_DIFF_CASES=N` and
//! `NMSPARSE_DIFF_SEED=S` run more (`cargo test --release --test differential -- --nocapture`),
//! `NMSPARSE_DIFF_MAX_SIZE=N` draws sizes up to N (default 6), and `NMSPARSE_DIFF_REFUSALS=1`
//! prints every refusal (to see what the lowering lacks). A second test reruns 150 cases with
//! the C kernels built with `-fsanitize=address,undefined`, in a child process with the
//! sanitizer runtimes preloaded.

mod common;

use common::{Dense, operand, reference_sized, stored_elements, structure_sized};
use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Format, Tensor};
use nmsparse::ir::id::Id;
use nmsparse::ir::notation::parse;
use nmsparse::{Backend, Error, Kernel, Program};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// A subscript: `(coefficient, variable)` terms and a constant (`2*i+k+1`).
#[derive(Clone, Debug)]
struct Subscript {
    terms: Vec<(i64, char)>,
    constant: i64,
}

impl Subscript {
    fn var(v: char) -> Self {
        Subscript { terms: vec![(1, v)], constant: 0 }
    }

    /// The extent it reaches: one past its largest value.
    fn extent(&self, sizes: &[usize; 4]) -> usize {
        let top: i64 = self.terms.iter().map(|&(c, v)| c * (sizes[var_index(v)] as i64 - 1)).sum();
        (top + self.constant + 1) as usize
    }

    fn text(&self) -> String {
        let mut parts: Vec<String> =
            self.terms.iter().map(|&(c, v)| if c == 1 { v.to_string() } else { format!("{c}*{v}") }).collect();
        if self.constant != 0 {
            parts.push(self.constant.to_string());
        }
        parts.join("+")
    }
}

/// One random case: the statement and each tensor's (name, subscripts, format).
#[derive(Clone)]
struct Case {
    expr: String,
    tensors: Vec<(String, Vec<Subscript>, String)>,
    sizes: [usize; 4],
    threads: usize,
    densities: Vec<f64>,
    /// A random loop order (`reorder(...)`) or none.
    schedule: Option<String>,
    /// A random workspace policy, or the analysis's choice.
    workspace: Option<nmsparse::ism::Config>,
    /// Pairs of variables whose sizes must stay equal: they index the same dimension of a
    /// tensor read by two accesses (`B(i,k) * B(k,j)`, `B(i,j) + B(j,i)`).
    ties: Vec<(usize, usize)>,
}

/// Gives every variable tied to `v` (directly or through others) the size of `v`.
fn equalize(sizes: &mut [usize; 4], ties: &[(usize, usize)], v: usize) {
    let mut class = vec![v];
    while let Some(&(a, b)) = ties.iter().find(|&&(a, b)| class.contains(&a) != class.contains(&b)) {
        class.push(if class.contains(&a) { b } else { a });
    }
    for w in class {
        sizes[w] = sizes[v];
    }
}

/// Whether a case reads some tensor through more than one access.
fn rereads(case: &Case) -> bool {
    case.tensors.iter().enumerate().any(|(n, t)| case.tensors[..n].iter().any(|u| u.0 == t.0))
}

fn var_index(v: char) -> usize {
    (v as u8 - b'i') as usize
}

fn random_case(rng: &mut Pcg64) -> Case {
    let result_vars: Vec<char> = if rng.random_bool(0.5) { vec!['i'] } else { vec!['i', 'j'] };
    let operands = rng.random_range(2..=3);
    let names = ["B", "C", "D"];
    // An inner product now and then: the result's variables split between the first two
    // operands, which share the reduction variable (`A(i,j) = B(i,k) * C(j,k)`).
    let inner_product = result_vars.len() == 2 && rng.random_bool(0.25);
    let mut tensors = Vec::new();
    let mut scaled = Vec::new();
    for (n, name) in names.iter().enumerate().take(operands) {
        // Vars: order 1 or 2, distinct, from i, j, k; the first operands cover the result.
        let mut vars: Vec<char> = match (n, result_vars.len()) {
            (0, _) if inner_product => vec!['i', 'k'],
            (1, _) if inner_product => {
                if rng.random_bool(0.5) {
                    vec!['j', 'k']
                } else {
                    vec!['k', 'j']
                }
            }
            (0, _) => result_vars.clone(),
            _ => {
                let pool = ['i', 'j', 'k', 'l'];
                // Order 4 now and then (all of i, j, k, l).
                let order = if rng.random_bool(0.1) { 4 } else { rng.random_range(1..=3) };
                let mut v: Vec<char> = Vec::new();
                while v.len() < order {
                    let c = pool[rng.random_range(0..4)];
                    if !v.contains(&c) {
                        v.push(c);
                    }
                }
                v
            }
        };
        if n == 0 && !inner_product && rng.random_bool(0.3) && vars.len() == 1 {
            vars.push('k');
        }
        let format = match vars.len() {
            // Non-unique compressed vectors (`u`) are read through copies.
            1 => ["dense", "s", "b", "u"][rng.random_range(0..4)].to_string(),
            2 => [
                "dense",
                "csr",
                // Band rows, and band columns.
                "db",
                "db:1,0",
                "dcsr",
                "ds:1,0",
                "coo",
                "nv24",
                "nm(2,4,2)",
                "nm(3,8,4)",
                "dcsc",
                "bcsr(2)",
                // Element-wise 1:4 along rows; blocks of two rows, compressed.
                "(i,j) -> (i:dense, j floordiv 4:dense, j mod 4:structured[1,4])",
                "(i,j) -> (i floordiv 2:compressed, j:compressed, i mod 2:dense)",
                // Dense rows under a compressed level; COO spelled in letters.
                "sd",
                "uq",
            ][rng.random_range(0..16)]
            .to_string(),
            3 => ["dense", "csf", "coo", "dds", "sds", "ddb", "sdd"][rng.random_range(0..7)].to_string(),
            _ => ["dense", "csf", "coo", "ddds", "dsds", "sdss"][rng.random_range(0..6)].to_string(),
        };
        // Now and then a compound subscript (a sliding window `i+k`, a stride `2*i+k`, an
        // offset `i+1`): sparse convolution. Not on N:M levels, which refuse them.
        let subscripts: Vec<Subscript> = vars
            .iter()
            .map(|&v| {
                if n == 0 || format.starts_with("n") || !rng.random_bool(0.25) {
                    return Subscript::var(v);
                }
                let pool = ['i', 'j', 'k', 'l'];
                let mut terms = vec![(rng.random_range(1..=2), v)];
                if rng.random_bool(0.7) {
                    let w = pool[rng.random_range(0..4)];
                    if w != v {
                        terms.push((1, w));
                    }
                }
                Subscript { terms, constant: rng.random_range(0..=2) }
            })
            .collect();
        scaled.push(rng.random_bool(0.15));
        tensors.push((name.to_string(), subscripts, format));
    }
    // A third of the cases read a tensor again: a later operand of the same order becomes
    // another access of an earlier one with plain subscripts (`B(i,k) * B(k,j)`, `B(i,k) *
    // B(j,k)`), or now and then the very same access (`B(i,j) * B(i,j)`).
    let mut ties = Vec::new();
    if rng.random_bool(0.33) {
        let n = rng.random_range(1..tensors.len());
        let m = rng.random_range(0..n);
        let plain =
            |subs: &[Subscript]| subs.iter().all(|s| s.terms.len() == 1 && s.terms[0].0 == 1 && s.constant == 0);
        if tensors[m].1.len() == tensors[n].1.len() && plain(&tensors[m].1) {
            let (name, source, format) = tensors[m].clone();
            let subscripts = if rng.random_bool(0.2) {
                source.clone()
            } else {
                // The operand's own variables, as plain subscripts.
                tensors[n].1.iter().map(|s| Subscript::var(s.terms[0].1)).collect()
            };
            for (s, t) in source.iter().zip(&subscripts) {
                ties.push((var_index(s.terms[0].1), var_index(t.terms[0].1)));
            }
            tensors[n] = (name, subscripts, format);
        }
    }
    let terms: Vec<String> = tensors
        .iter()
        .zip(&scaled)
        .map(|((name, subscripts, _), &scaled)| {
            let access = format!("{name}({})", subscripts.iter().map(Subscript::text).collect::<Vec<_>>().join(","));
            if scaled { format!("2 * {access}") } else { access }
        })
        .collect();
    let mut expr = terms[0].clone();
    for term in &terms[1..] {
        let op = ["+", "-", "*"][rng.random_range(0..3)];
        expr = format!("{expr} {op} {term}");
    }
    let result_format = match result_vars.len() {
        1 => ["dense", "s"][rng.random_range(0..2)],
        _ => ["dense", "csr", "dcsr", "csc", "coo"][rng.random_range(0..5)],
    };
    let lhs = format!("A({})", result_vars.iter().map(char::to_string).collect::<Vec<_>>().join(","));
    tensors.insert(0, ("A".into(), result_vars.iter().map(|&v| Subscript::var(v)).collect(), result_format.into()));
    let max = std::env::var("NMSPARSE_DIFF_MAX_SIZE").ok().and_then(|v| v.parse().ok()).unwrap_or(6usize).max(1);
    let mut sizes: [usize; 4] = std::array::from_fn(|_| rng.random_range(1..=max));
    for &(a, _) in &ties.clone() {
        equalize(&mut sizes, &ties, a);
    }
    let densities: Vec<f64> = tensors.iter().map(|_| [0.0, 0.3, 0.6, 1.0][rng.random_range(0..4)]).collect();
    // Three threads now and then: row ranges taken from both ends by more than one worker.
    let threads = [1, 2, 2, 3][rng.random_range(0..4)];
    let schedule = random_schedule(rng, &tensors, &expr);
    let workspace = rng.random_bool(0.3).then(|| {
        use nmsparse::ism::{Config, Policy};
        let policies = [
            Policy::Dense,
            Policy::Auto,
            Policy::Bucket,
            Policy::Hash(None),
            Policy::Hash(Some(2)),
            Policy::Coord,
            Policy::Map,
            Policy::Vector,
        ];
        let policy = policies[rng.random_range(0..policies.len())];
        // Small capacities flush often; `auto` decides on an eighth of its capacity, so it
        // gets a larger one half the time (else it always decides on one component).
        let capacity = if policy == Policy::Auto && rng.random_bool(0.5) {
            rng.random_range(8..=64)
        } else {
            rng.random_range(1..=9)
        };
        Config { capacity, pipelined: rng.random_bool(0.3), ..Config::new(policy) }
    });
    // Now and then the first operand read again in the reverse order (`B(i,j) + B(j,i)`): its
    // reversed dimensions get equal sizes. Both reads are of `B`'s data.
    let first: Vec<char> = tensors[1].1.iter().map(|s| s.terms[0].1).collect();
    if first.len() >= 2 && rng.random_bool(0.12) {
        let (lo, hi) = (var_index(first[0]), var_index(first[first.len() - 1]));
        ties.push((lo, hi));
        equalize(&mut sizes, &ties, lo);
        let reversed: Vec<String> = first.iter().rev().map(char::to_string).collect();
        let op = ["+", "-", "*"][rng.random_range(0..3)];
        expr = format!("{expr} {op} B({})", reversed.join(","));
        let (name, subscripts, format) = tensors[1].clone();
        tensors.push((name, subscripts.into_iter().rev().collect(), format));
    }
    // OpenMP hands out a parallel loop's iterations 16 at a time: with 16 or fewer, one thread
    // takes them all and no race can show (one hid this way at sizes up to 6). The variables
    // a parallel loop comes from get 34 to 60 coordinates.
    if let Some(at) = schedule.as_deref().and_then(|s| s.find("parallelize(")) {
        let text = schedule.as_deref().unwrap_or_default();
        let name = &text[at + "parallelize(".len()..];
        let fused = text.find("fuse(").map(|f| text[f + "fuse(".len()..].split(", ").take(2).collect::<Vec<_>>());
        let origins: Vec<char> = match fused {
            Some(pair) if name.starts_with('f') => pair.iter().filter_map(|v| v.chars().next()).collect(),
            _ => name.chars().next().into_iter().collect(),
        };
        for v in origins {
            sizes[var_index(v)] = rng.random_range(34..=60);
            equalize(&mut sizes, &ties, var_index(v));
        }
    }
    let schedule = schedule.map(|s| sized_bounds(&s, &sizes, rng));
    Case { expr: format!("{lhs} = {expr}"), tensors, sizes, threads, densities, schedule, workspace, ties }
}

/// `bound` on a variable of the statement gets a value its size keeps (exactly the size for
/// the exact kinds, at least or at most it for the constraints) — four times in five; the
/// fifth breaks the promise, which must be refused by name. Bounds on variables the schedule
/// made keep the drawn value.
fn sized_bounds(schedule: &str, sizes: &[usize; 4], rng: &mut Pcg64) -> String {
    let commands: Vec<String> = schedule
        .split("; ")
        .map(|c| {
            let Some(args) = c.strip_prefix("bound(").and_then(|a| a.strip_suffix(')')) else { return c.to_string() };
            let args: Vec<&str> = args.split(", ").collect();
            let Some(var) = ["i", "j", "k", "l"].iter().position(|v| *v == args[0]) else { return c.to_string() };
            let size = sizes[var];
            let keep = rng.random_bool(0.8);
            let value = match (args[3], keep) {
                ("min_exact" | "max_exact", true) => size,
                ("min_exact" | "max_exact", false) => size + 1,
                ("max_constraint", true) => size + rng.random_range(0..=2),
                ("min_constraint", true) => rng.random_range(1..=size),
                ("max_constraint", false) => size - 1,
                (_, false) => size + 1,
                _ => unreachable!("a bound kind"),
            };
            format!("bound({}, {}, {value}, {})", args[0], args[1], args[3])
        })
        .collect();
    commands.join("; ")
}

/// A random schedule, or none: now and then each of the scheduling language's commands, in
/// this order, on the loops the earlier ones left — a loop order (`reorder`), a `split` of one
/// loop, a `fuse` of two loops next to each other in the order written, a `pos` of one loop
/// over an operand's positions, `parallelize` on CPU threads or vector lanes (`ignore_races`
/// only on a variable of the result, where no two iterations write one element), an
/// `unroll`, a `bound`, a `precompute` of the right-hand side or one of its operands. An
/// illegal command, or one the lowering does not take, is counted as refused; what runs must
/// agree with the reference.
fn random_schedule(rng: &mut Pcg64, tensors: &[(String, Vec<Subscript>, String)], rhs: &str) -> Option<String> {
    // Most schedules are refused (illegal, or not lowered): keep plenty of cases without one.
    if rng.random_bool(0.4) {
        return None;
    }
    let mut loops: Vec<String> = case_vars(tensors).iter().map(char::to_string).collect();
    let result: Vec<String> = tensors[0].1.iter().map(|s| s.terms[0].1.to_string()).collect();
    let mut commands = Vec::new();
    let pick = |rng: &mut Pcg64, loops: &[String]| loops[rng.random_range(0..loops.len())].clone();
    if rng.random_bool(0.3) {
        for i in (1..loops.len()).rev() {
            loops.swap(i, rng.random_range(0..=i));
        }
        commands.push(format!("reorder({})", loops.join(", ")));
    }
    if rng.random_bool(0.15) {
        let at = rng.random_range(0..loops.len());
        let v = loops[at].clone();
        commands.push(format!("split({v}, {v}0, {v}1, {})", rng.random_range(2..=3)));
        loops.splice(at..=at, [format!("{v}0"), format!("{v}1")]);
    }
    if loops.len() >= 2 && rng.random_bool(0.12) {
        let at = rng.random_range(0..loops.len() - 1);
        commands.push(format!("fuse({}, {}, f)", loops[at], loops[at + 1]));
        loops.splice(at..=at + 1, ["f".to_string()]);
    }
    if rng.random_bool(0.12) {
        // An operand and one of its plain (single-variable) subscripts still a loop.
        let (name, subscripts, _) = &tensors[rng.random_range(1..tensors.len())];
        let plain: Vec<String> = subscripts
            .iter()
            .filter(|s| s.terms.len() == 1 && s.terms[0].0 == 1 && s.constant == 0)
            .map(|s| s.terms[0].1.to_string())
            .filter(|v| loops.contains(v))
            .collect();
        if !plain.is_empty() {
            let v = plain[rng.random_range(0..plain.len())].clone();
            commands.push(format!("pos({v}, {v}p, {name})"));
            let at = loops.iter().position(|l| *l == v).expect("a loop");
            loops[at] = format!("{v}p");
        }
    }
    if rng.random_bool(0.2) {
        let v = pick(rng, &loops);
        let unit = if rng.random_bool(0.8) { "cpu_thread" } else { "cpu_vector" };
        // A loop that does not index the result: no_races must be refused; the strategies that
        // add into the same elements run where the loop is outermost.
        let race = match (result.contains(&v), rng.random_range(0..6)) {
            (true, 0 | 1) => "ignore_races",
            (true, _) | (false, 0..=2) => "no_races",
            (false, 3) => "atomics",
            (false, 4) => "temporary",
            (false, _) => "parallel_reduction",
        };
        commands.push(format!("parallelize({v}, {unit}, {race})"));
    }
    if rng.random_bool(0.1) {
        let v = pick(rng, &loops);
        commands.push(format!("unroll({v}, {})", rng.random_range(2..=4)));
    }
    if rng.random_bool(0.05) {
        let v = pick(rng, &loops);
        let kind = ["min_exact", "min_constraint", "max_exact", "max_constraint"][rng.random_range(0..4)];
        commands.push(format!("bound({v}, {v}b, 8, {kind})"));
    }
    if rng.random_bool(0.1) {
        let v = pick(rng, &loops);
        // The whole right-hand side, or one operand's access (`B(i,j)`).
        let expr = if rng.random_bool(0.5) {
            rhs.to_string()
        } else {
            let (name, subscripts, _) = &tensors[rng.random_range(1..tensors.len())];
            format!("{name}({})", subscripts.iter().map(Subscript::text).collect::<Vec<_>>().join(","))
        };
        commands.push(format!("precompute({expr}, {v}, {v}w, w)"));
    }
    (!commands.is_empty()).then(|| commands.join("; "))
}

/// The variables a case's tensors use, sorted.
fn case_vars(tensors: &[(String, Vec<Subscript>, String)]) -> Vec<char> {
    let mut vars: Vec<char> =
        tensors.iter().flat_map(|(_, subs, _)| subs.iter().flat_map(|s| s.terms.iter().map(|t| t.1))).collect();
    vars.sort_unstable();
    vars.dedup();
    vars
}

/// A case's operands, generated and stored in their formats (once per tensor, however many
/// accesses read it), the dense reference's result and the elements a sparse result may store,
/// every variable's size and every tensor's shape (in `case.tensors` order).
struct Prepared<T> {
    operands: Vec<(String, Tensor<T>)>,
    expected: Vec<f64>,
    structure: Structure,
    sizes: Vec<(String, usize)>,
    shapes: Vec<Vec<usize>>,
}

fn prepare<T: nmsparse::Scalar + Into<f64>>(case: &Case, seed: u64) -> Result<Prepared<T>, String> {
    let stmt = parse(&case.expr).map_err(|e| format!("{}: {e}", case.expr))?;
    let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
    let (mut stored, mut nonzero) = (vec![None; stmt.tensors.len()], vec![None; stmt.tensors.len()]);
    let mut operands = Vec::new();
    let mut shapes = Vec::new();
    let sizes: Vec<(String, usize)> =
        case_vars(&case.tensors).into_iter().map(|v| (v.to_string(), case.sizes[var_index(v)])).collect();
    for (n, (name, subscripts, format)) in case.tensors.iter().enumerate() {
        let shape: Vec<usize> = subscripts.iter().map(|s| s.extent(&case.sizes)).collect();
        let id = stmt.tensor_named(name).expect("in the statement");
        d.shapes[id.index()] = shape.clone();
        shapes.push(shape.clone());
        if n == 0 || d.arrays[id.index()].is_some() {
            continue;
        }
        let f = Format::parse(format, shape.len()).map_err(|e| e.to_string())?;
        let list = uniform::<T>(&shape, case.densities[n], Values::SmallIntegers(4), seed + n as u64);
        let t = operand(&list, &f).map_err(|e| e.to_string())?;
        d.arrays[id.index()] = Some(t.to_dense().unwrap().into_iter().map(Into::into).collect());
        stored[id.index()] = Some(stored_elements(&t));
        nonzero[id.index()] = Some(d.arrays[id.index()].as_ref().unwrap().iter().map(|&v| v != 0.0).collect());
        operands.push((name.clone(), t));
    }
    let given: Vec<(&str, usize)> = sizes.iter().map(|(v, n)| (v.as_str(), *n)).collect();
    let expected = reference_sized(&case.expr, &d, &given);
    let structure = Structure {
        at_least: structure_sized(&case.expr, &d.shapes, &nonzero, &given),
        at_most: structure_sized(&case.expr, &d.shapes, &stored, &given),
    };
    Ok(Prepared { operands, expected, structure, sizes, shapes })
}

/// The elements a sparse result stores: those where the co-iteration of the operands' stored
/// components produces a term. An operand's explicit zeros (every element of a dense one, the
/// padding of N:M and blocked formats) may be dropped where the kernel reads a copy of it in
/// another format, so the result stores at least where the operands' nonzeros produce a term,
/// and at most where their stored components do.
struct Structure {
    at_least: Vec<bool>,
    at_most: Vec<bool>,
}

/// Whether `got`, the result of `case`, stores what `structure` allows: no coordinate the
/// operands did not reach, none lost that they did.
fn check_stored<T: nmsparse::format::Value>(case: &Case, got: &Tensor<T>, structure: &Structure) -> Result<(), String> {
    if case.tensors[0].2 == "dense" {
        return Ok(());
    }
    let stored = stored_elements(got);
    let within =
        stored.iter().zip(&structure.at_least).zip(&structure.at_most).all(|((&s, &lo), &hi)| (!lo || s) && (!s || hi));
    if within {
        return Ok(());
    }
    let count = |v: &[bool]| v.iter().filter(|&&b| b).count();
    Err(format!(
        "stores {} elements where the operands produce terms at {} to {}:\n  stored   {stored:?}\n  at least {:?}\n  at most  {:?}",
        count(&stored),
        count(&structure.at_least),
        count(&structure.at_most),
        structure.at_least,
        structure.at_most
    ))
}

/// Runs one case through the `nmsparse` command (see
/// `random_statements_through_the_command_agree_with_the_dense_reference`), with the options
/// `variant` picks; as [`run_case`], `Some(false)` when the command refuses the statement by
/// name, `None` when it refuses its random schedule.
fn run_case_command(case: &Case, seed: u64, variant: usize, dir: &std::path::Path) -> Result<Option<bool>, String> {
    let Prepared { operands, expected, structure, sizes, .. } = prepare::<f64>(case, seed)?;
    let mut args = vec![case.expr.clone()];
    for (n, (name, _, format)) in case.tensors.iter().enumerate() {
        if case.tensors[..n].iter().all(|t| t.0 != *name) {
            args.push(format!("-f={name}:{format}"));
        }
    }
    for (name, t) in &operands {
        let path = dir.join(format!("{name}.tns"));
        nmsparse::format::io::write_tensor(&path, t).map_err(|e| e.to_string())?;
        args.push(format!("-i={name}:{}", path.display()));
    }
    for (v, size) in &sizes {
        args.push(format!("-d={v}:{size}"));
    }
    if let Some(schedule) = &case.schedule {
        args.push(format!("-s={schedule}"));
    }
    if let Some(w) = case.workspace {
        args.push(format!("-workspace={}", w.policy));
    }
    // Without -nthreads now and then: a schedule's parallelize then runs on every core.
    if case.threads > 1 || !variant.is_multiple_of(3) {
        args.push(format!("-nthreads={}", case.threads));
    }
    // A matrix result now and then as Matrix Market (dense: an array, column-major).
    let out = dir.join(if case.tensors[0].1.len() == 2 && variant % 7 < 3 { "A.mtx" } else { "A.tns" });
    let _ = std::fs::remove_file(&out);
    args.push(format!("-o=A:{}", out.display()));
    // Taco's assembly then compute kernels, or fused (`-c`); compute run again on one assembly
    // (`-time=2`); the interpreter now and then; f32 now and then (small integers: exact).
    if variant % 3 == 1 {
        args.push("-c".into());
    }
    if variant.is_multiple_of(2) {
        args.push("-time=2".into());
    }
    if variant % 5 == 4 {
        args.push("-backend=interp".into());
    }
    if variant % 4 == 3 {
        args.push("-type=f32".into());
    }
    let run =
        std::process::Command::new(env!("CARGO_BIN_EXE_nmsparse")).args(&args).output().map_err(|e| e.to_string())?;
    let said = String::from_utf8_lossy(&run.stderr).into_owned();
    let command = || args.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" ");
    if !run.status.success() {
        let refused = said.contains("cannot lower this statement yet")
            || ["reorder:", "split:", "fuse:", "pos:", "parallelize:", "unroll:", "bound:", "bound(", "precompute:"]
                .iter()
                .any(|c| said.contains(&format!("error: {c}")));
        if std::env::var_os("NMSPARSE_DIFF_REFUSALS").is_some() {
            eprintln!("refused: {said}");
        }
        return match (refused, &case.schedule) {
            (true, Some(_)) => Ok(None),
            (true, None) => Ok(Some(false)),
            (false, _) => Err(format!("nmsparse {} failed:\n{said}", command())),
        };
    }
    let got = nmsparse::format::io::read_tensor::<f64>(&out, &case.tensors[0].2)
        .map_err(|e| format!("nmsparse {}: reading its result: {e}", command()))?;
    check_stored(case, &got, &structure).map_err(|e| format!("nmsparse {}: {e}\n{said}", command()))?;
    let got = got.to_dense().unwrap();
    if got != expected {
        return Err(format!("nmsparse {}:\n  got      {got:?}\n  expected {expected:?}\n{said}", command()));
    }
    Ok(Some(true))
}

/// The random statements through the `nmsparse` command, the path users take: operands written
/// as `.tns` files and read with `-i` (converted into their formats), the result written with
/// `-o` (`.tns`, or `.mtx` for some matrices) and read back, with taco's separate assembly and
/// compute kernels (the default) or fused (`-c`), compute run twice on one assembly
/// (`-time=2`), `-nthreads` (or none, where a schedule's `parallelize` takes every core), `-workspace`, `-type=f32` and the interpreter. 60 cases by default
/// (`NMSPARSE_DIFF_COMMAND_CASES=N` for more).
#[test]
fn random_statements_through_the_command_agree_with_the_dense_reference() {
    let cases: usize = std::env::var("NMSPARSE_DIFF_COMMAND_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let seed: u64 = std::env::var("NMSPARSE_DIFF_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(20261124);
    let dir = std::env::temp_dir().join(format!("nmsparse-diff-command-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Pcg64::seed_from_u64(seed);
    let (mut ran, mut refused, mut schedules_refused) = (0, 0, 0);
    let mut failures = Vec::new();
    for n in 0..cases {
        let case = random_case(&mut rng);
        match run_case_command(&case, seed.wrapping_add(n as u64 * 7), n, &dir) {
            Ok(Some(true)) => ran += 1,
            Ok(Some(false)) => refused += 1,
            Ok(None) => schedules_refused += 1,
            Err(e) => failures.push(e),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "differential (command): {ran} cases agreed, {refused} refused, {schedules_refused} random schedules refused, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    let considered = cases - schedules_refused;
    assert!(ran * 5 > considered * 2, "only {ran} of {considered} cases ran");
}

/// Runs one case on both back ends: `Some(true)` when both agree with the reference,
/// `Some(false)` when the lowering refuses it by name, `None` when its random schedule is
/// refused (illegal, or an order the lowering does not take).
fn run_case<T: nmsparse::Scalar + Into<f64>>(case: &Case, seed: u64) -> Result<Option<bool>, String> {
    let Prepared { operands, expected, structure, sizes, shapes } = prepare::<T>(case, seed)?;
    let mut program = Program::new(&case.expr).map_err(|e| e.to_string())?;
    for (v, size) in &sizes {
        program = program.index_size(v, *size);
    }
    for (n, ((name, _, format), shape)) in case.tensors.iter().zip(&shapes).enumerate() {
        if case.tensors[..n].iter().all(|t| t.0 != *name) {
            program = program.tensor(name, shape, format).map_err(|e| e.to_string())?;
        }
    }
    if let Some(schedule) = &case.schedule {
        program = program.schedule(schedule);
    }
    if let Some(w) = case.workspace {
        program = program.workspace(w);
    }
    let args: Vec<(&str, &Tensor<T>)> = operands.iter().map(|(n, t)| (n.as_str(), t)).collect();
    if std::env::var_os("NMSPARSE_DIFF_VERBOSE").is_some() {
        eprintln!(
            "case: {} [{:?}] [{:?}] {:?} sizes {:?} densities {:?} {} threads",
            case.expr, case.schedule, case.workspace, case.tensors, case.sizes, case.densities, case.threads
        );
    }
    for backend in [Backend::Interp, Backend::Jit] {
        let kernel = match program.compile::<T>(backend) {
            Ok(k) => k,
            // An inconsistent IR is the compiler's bug, never a refusal by name.
            Err(
                e @ (Error::Lower(nmsparse::lower::lower::LowerError::Internal(_))
                | Error::Schedule(nmsparse::ir::concrete::ScheduleError::Inconsistent(_))),
            ) => return Err(format!("{} [{:?}] {:?}: {e}", case.expr, case.schedule, case.tensors)),
            // Refused by name: the lowering (not yet), or a random schedule that is illegal.
            Err(e @ (Error::Lower(_) | Error::Schedule(_))) => {
                if std::env::var_os("NMSPARSE_DIFF_REFUSALS").is_some() {
                    eprintln!("refused: {e}\n  in {} {:?} [{:?}]", case.expr, case.tensors, case.schedule);
                }
                return Ok(if case.schedule.is_some() { None } else { Some(false) });
            }
            Err(e) => return Err(format!("{} [{:?}] {:?}: {e}", case.expr, case.schedule, case.tensors)),
        };
        // The text form says everything: each kernel parses back to what prints the same.
        for f in kernel.functions() {
            let text = f.to_string();
            match nmsparse::lower::ir::Function::parse(&text) {
                Ok(parsed) if parsed.to_string() == text => {}
                Ok(_) => return Err(format!("{}: the loops print differently once parsed:\n{text}", case.expr)),
                Err(e) => return Err(format!("{}: the printed loops do not parse: {e}\n{text}", case.expr)),
            }
        }
        if let Some(path) = std::env::var_os("NMSPARSE_DIFF_DUMP")
            && backend == Backend::Interp
        {
            dump_loops(&path, case, &kernel).map_err(|e| format!("NMSPARSE_DIFF_DUMP: {e}"))?;
        }
        let got = kernel.with_threads(case.threads).run(&args).map_err(|e| {
            format!(
                "{} [{:?}] {:?}: {e} (sizes {:?}, densities {:?}, {} threads, {backend:?})",
                case.expr, case.schedule, case.tensors, case.sizes, case.densities, case.threads
            )
        })?;
        check_stored(case, &got, &structure).map_err(|e| {
            let data: Vec<String> = operands
                .iter()
                .map(|(n, t)| {
                    let l = t.to_coordinates();
                    format!("{n}: {:?} {:?}", l.coords, l.values.iter().map(|&v| v.into()).collect::<Vec<f64>>())
                })
                .collect();
            format!(
                "{} [{:?}] [{:?}] with {:?}, sizes {:?}, densities {:?} on {backend:?}, {} threads: {e}\n  operands {}",
                case.expr,
                case.schedule,
                case.workspace,
                case.tensors,
                case.sizes,
                case.densities,
                case.threads,
                data.join("; ")
            )
        })?;
        let got: Vec<f64> = got.to_dense().unwrap().into_iter().map(Into::into).collect();
        if got != expected {
            return Err(format!(
                "{} [{:?}] [{:?}] with {:?}, sizes {:?}, densities {:?} on {backend:?}, {} threads:\n  got      {got:?}\n  expected {expected:?}",
                case.expr, case.schedule, case.workspace, case.tensors, case.sizes, case.densities, case.threads
            ));
        }
    }
    Ok(Some(true))
}

/// Appends the case and every function its kernel runs (the loop IR in full, `Debug`) to
/// `path`: two builds' files, made with the same seed, show whether a restructuring of the
/// compiler changed any kernel (TESTING.md, "The differential tests").
fn dump_loops<T: nmsparse::Scalar>(path: &std::ffi::OsStr, case: &Case, kernel: &Kernel<T>) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(
        f,
        "== {} [{:?}] [{:?}] {:?} sizes {:?}",
        case.expr, case.schedule, case.workspace, case.tensors, case.sizes
    )?;
    writeln!(f, "{}", kernel.describe())?;
    for func in kernel.functions() {
        writeln!(f, "{func:?}")?;
    }
    for (name, part) in kernel.parts() {
        writeln!(f, "part {name}")?;
        for func in part.functions() {
            writeln!(f, "{func:?}")?;
        }
    }
    Ok(())
}

#[test]
fn random_statements_agree_with_the_dense_reference_on_both_back_ends() {
    let cases: usize = std::env::var("NMSPARSE_DIFF_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let seed: u64 = std::env::var("NMSPARSE_DIFF_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(20261122);
    let mut rng = Pcg64::seed_from_u64(seed);
    let (mut ran, mut refused, mut schedules_refused, mut rereading, mut scheduled) = (0, 0, 0, 0, 0);
    let mut failures = Vec::new();
    for n in 0..cases {
        let case = random_case(&mut rng);
        // Every fourth case in f32 (small integers: exact in both).
        let case_seed = seed.wrapping_add(n as u64 * 7);
        let run = |case: &Case| {
            if n % 4 == 3 { run_case::<f32>(case, case_seed) } else { run_case::<f64>(case, case_seed) }
        };
        match run(&case) {
            Ok(Some(true)) => {
                ran += 1;
                rereading += usize::from(rereads(&case));
                scheduled += usize::from(case.schedule.is_some());
            }
            Ok(Some(false)) => refused += 1,
            Ok(None) => schedules_refused += 1,
            Err(e) => {
                let (_, shrunk) = shrink(&case, e.clone(), run);
                failures.push(format!("{e}\n  shrunk to: {shrunk}"));
            }
        }
    }
    eprintln!(
        "differential: {ran} cases agreed ({rereading} reading a tensor through two accesses, {scheduled} scheduled), {refused} refused by the lowering, {schedules_refused} random schedules refused, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    let considered = cases - schedules_refused;
    assert!(ran * 5 > considered * 2, "only {ran} of {considered} cases compiled");
}

/// A failing case made smaller while it still fails: each variable's size down to 1 (else
/// halved, else one less), one thread, no schedule, no workspace policy, full operands (a
/// density of 1 is easier to read than a random pattern). Returns the last failing case and
/// its failure.
fn shrink(case: &Case, failure: String, run: impl Fn(&Case) -> Result<Option<bool>, String>) -> (Case, String) {
    let (mut best, mut why) = (case.clone(), failure);
    for _ in 0..40 {
        let mut candidates = Vec::new();
        for v in 0..4 {
            let n = best.sizes[v];
            for smaller in [1, n / 2, n.saturating_sub(1)] {
                if smaller >= 1 && smaller < n {
                    let mut c = best.clone();
                    c.sizes[v] = smaller;
                    equalize(&mut c.sizes, &c.ties, v);
                    candidates.push(c);
                }
            }
        }
        let mut c = best.clone();
        c.threads = 1;
        candidates.push(c);
        let mut c = best.clone();
        c.schedule = None;
        candidates.push(c);
        let mut c = best.clone();
        c.workspace = None;
        candidates.push(c);
        for k in 1..best.densities.len() {
            let mut c = best.clone();
            c.densities[k] = 1.0;
            candidates.push(c);
        }
        let differs = |c: &Case| {
            c.sizes != best.sizes
                || c.threads != best.threads
                || c.schedule != best.schedule
                || c.workspace.is_some() != best.workspace.is_some()
                || c.densities != best.densities
        };
        let next = candidates.into_iter().filter(differs).find_map(|c| run(&c).err().map(|e| (c, e)));
        match next {
            Some((c, e)) => (best, why) = (c, e),
            None => break,
        }
    }
    (best, why)
}

/// The sanitizer runtimes of the machine's `cc`, to preload (`None` when it has none).
fn sanitizer_runtimes() -> Option<String> {
    let mut paths = Vec::new();
    for lib in ["libasan.so", "libubsan.so"] {
        let out = std::process::Command::new("cc").arg(format!("-print-file-name={lib}")).output().ok()?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // Without the library, the compiler echoes the bare name.
        if !std::path::Path::new(&path).is_absolute() || !std::path::Path::new(&path).exists() {
            return None;
        }
        paths.push(path);
    }
    Some(paths.join(":"))
}

/// Issue 9: the generated kernels of the differential suite, compiled with
/// `-fsanitize=address,undefined` (through `NMSPARSE_CFLAGS`), run clean. The kernels are
/// loaded into this test binary, so it re-runs itself with the sanitizer runtimes preloaded;
/// a control kernel that writes past its buffer must be caught under the same setup, so a
/// setup that checks nothing fails the test.
#[test]
fn generated_kernels_run_clean_under_address_and_undefined_behaviour_sanitizers() {
    if std::env::var_os("NMSPARSE_UNDER_SANITIZERS").is_some() {
        return;
    }
    let Some(preload) = sanitizer_runtimes() else {
        eprintln!("skipped: cc has no libasan/libubsan to preload");
        return;
    };
    let cache = std::env::temp_dir().join(format!("nmsparse-sanitized-{}", std::process::id()));
    let run = |test: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--include-ignored", "--nocapture", "--test-threads=1"])
            .env("NMSPARSE_UNDER_SANITIZERS", "1")
            .env("LD_PRELOAD", &preload)
            .env("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
            .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
            .env("NMSPARSE_CFLAGS", "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all")
            .env("NMSPARSE_CACHE_DIR", &cache)
            .env("NMSPARSE_DIFF_CASES", "150")
            .env("NMSPARSE_DIFF_SEED", "6006")
            .output()
            .unwrap()
    };
    let control = run("sanitizer_control_writes_past_its_buffer");
    let said = String::from_utf8_lossy(&control.stderr).into_owned();
    assert!(
        !control.status.success() && said.contains("heap-buffer-overflow"),
        "the control kernel's overflow went unnoticed: the sanitizers are not on\n{said}"
    );
    let suite = run("random_statements_agree_with_the_dense_reference_on_both_back_ends");
    let said = String::from_utf8_lossy(&suite.stderr).into_owned();
    assert!(suite.status.success(), "{said}");
    assert!(said.contains(" 0 failed"), "{said}");
    let _ = std::fs::remove_dir_all(&cache);
}

/// The control of the test above: only run by it, in a process with the sanitizer runtimes.
#[test]
#[ignore = "run by generated_kernels_run_clean_under_address_and_undefined_behaviour_sanitizers"]
fn sanitizer_control_writes_past_its_buffer() {
    // Never without the sanitizers (`--include-ignored` in a plain run): the store is real.
    if std::env::var_os("NMSPARSE_UNDER_SANITIZERS").is_none() {
        eprintln!("skipped: only runs under the sanitizers");
        return;
    }
    const OVERFLOW: &str = "#include <stdlib.h>\nint overflow(long n) {\n  volatile double *a = malloc(n * sizeof(double));\n  a[n] = 1.0;\n  int r = (int)a[0];\n  free((void *)a);\n  return r;\n}\n";
    let cc = nmsparse::lower::jit::CCompiler::from_env().unwrap();
    let compiled = cc.compile(OVERFLOW, nmsparse::lower::jit::CompileOptions::default()).unwrap();
    // SAFETY: `overflow` has this C signature. Its out-of-bounds store is the point: this
    // test only runs under AddressSanitizer, which stops the process at that store.
    let f = unsafe { compiled.function::<unsafe extern "C" fn(i64) -> i32>("overflow") }.unwrap();
    // SAFETY: as above.
    let r = unsafe { f(8) };
    panic!("the out-of-bounds store returned ({r}): no sanitizer caught it");
}

/// The shrinker keeps what the failure needs and drops the rest: here a "failure" whenever
/// `i` has at least 3 coordinates and `B` is not full.
#[test]
fn shrinking_keeps_what_fails_and_drops_the_rest() {
    let mut rng = Pcg64::seed_from_u64(3);
    let mut case = random_case(&mut rng);
    case.sizes = [6, 5, 4, 6];
    case.threads = 2;
    case.densities = vec![1.0, 0.3, 0.6];
    let fails = |c: &Case| {
        if c.sizes[0] >= 3 && c.densities[1] < 1.0 { Err(format!("fails at {:?}", c.sizes)) } else { Ok(Some(true)) }
    };
    let (small, why) = shrink(&case, "fails".into(), fails);
    assert_eq!(small.sizes, [3, 1, 1, 1], "{why}");
    assert_eq!((small.threads, small.schedule.as_deref(), small.densities[1]), (1, None, 0.3));
    assert_eq!(why, "fails at [3, 1, 1, 1]");
}

/// Found by the differential tests (seed 9191, shrunk): a `split` loop co-iterating a sparse
/// operand restarted the operand's iterator from its first entry in every block, so blocks
/// after the first never met their entries.
#[test]
fn a_split_loop_meets_the_sparse_entries_of_every_block() {
    let plain = |v: char| Subscript::var(v);
    let cases = [
        ("A(i) = B(i) + C(i)", vec![("A", "s"), ("B", "s"), ("C", "dense")], [4, 1, 1, 1], "split(i, i0, i1, 3)"),
        ("A(i) = B(i) - C(i)", vec![("A", "dense"), ("B", "dense"), ("C", "s")], [3, 1, 1, 1], "split(i, i0, i1, 2)"),
        ("A(i) = B(i) + C(i)", vec![("A", "dense"), ("B", "coo"), ("C", "dense")], [7, 1, 1, 1], "split(i, i0, i1, 3)"),
    ];
    for (expr, formats, sizes, schedule) in cases {
        let tensors = formats.iter().map(|(n, f)| (n.to_string(), vec![plain('i')], f.to_string())).collect();
        let case = Case {
            expr: expr.into(),
            tensors,
            sizes,
            threads: 1,
            densities: vec![1.0, 0.6, 1.0],
            schedule: Some(schedule.into()),
            workspace: None,
            ties: Vec::new(),
        };
        assert_eq!(run_case::<f64>(&case, 9191), Ok(Some(true)), "{expr} [{schedule}] {formats:?}");
    }
    // Two dimensions: the split inner loop over DCSR's second level.
    let case = Case {
        expr: "A(i,j) = B(i,j) - C(l)".into(),
        tensors: vec![
            ("A".into(), vec![plain('i'), plain('j')], "csc".into()),
            ("B".into(), vec![plain('i'), plain('j')], "dcsr".into()),
            ("C".into(), vec![plain('l')], "dense".into()),
        ],
        sizes: [2, 7, 1, 1],
        threads: 1,
        densities: vec![0.0, 0.6, 1.0],
        schedule: Some("split(j, j0, j1, 3)".into()),
        workspace: None,
        ties: Vec::new(),
    };
    assert_eq!(run_case::<f64>(&case, 9191), Ok(Some(true)));
}
