//! The file tests: each file in `tests/filetests/` names a statement (or a kernel written by
//! hand) and what to do with it, and holds what that must give, so that a change to the
//! compiler shows up as a readable diff of the file.
//!
//! A file starts with its directives and its input, then one `== section` per directive:
//!
//! ```text
//! test concretize          the default loops, scheduled (`== concretize`)
//! test lower               the loop IR (`== lower`), which must also parse back to itself
//! test emit                the C (`== emit`)
//! test run                 the result's stored entries (`== run`), the same on the
//!                          interpreter, in C and (where the kernel has row ranges) on 2 and 3
//!                          threads
//! test verify              the verifier's verdict on the kernel of `== loops` (`== verify`)
//!
//! expr y(i) = A(i,j) * x(j)        the statement
//! schedule reorder(j, i)           its schedule (optional)
//! tensor A [3, 4] csr              a tensor: shape, format (dense when left out)
//! size p 3                         an index variable's size, where no tensor gives it
//! A(0, 1) = 2.5                    an operand's entry (the others are zero)
//! contains TEXT / lacks TEXT       what the loop IR must, or must not, contain
//! ```
//!
//! Lines starting with `;` are comments. After checking a change, `NMSPARSE_BLESS=1 cargo
//! test -p nm-lower --test filetests` rewrites the sections with what the compiler gives now.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use nm_format::{Duplicates, Format, Tensor};
use nm_ir::concrete::{ConcreteNotation, concretize_for, parse_schedule};
use nm_ir::notation::{Declarations, IndexNotation, TensorType, Types, parse};
use nm_lower::c::{CKernel, emit};
use nm_lower::interp::interpret;
use nm_lower::ir::{ElemType, Function};
use nm_lower::jit::CCompiler;
use nm_lower::lower::{Lowered, arguments, lower, result_tensor};

/// What a file asks, read from its head.
#[derive(Default)]
struct Spec {
    directives: Vec<String>,
    expr: Option<String>,
    schedule: Option<String>,
    /// (name, shape, format)
    tensors: Vec<(String, Vec<usize>, Option<Format>)>,
    sizes: Vec<(String, usize)>,
    /// (tensor, coordinates, value)
    entries: Vec<(String, Vec<usize>, f64)>,
    contains: Vec<String>,
    lacks: Vec<String>,
}

/// A file: its head (kept as written) and its sections in order.
struct File {
    head: String,
    sections: Vec<(String, String)>,
}

fn read(text: &str) -> File {
    let mut head = String::new();
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            sections.push((name.trim().to_string(), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
            body.push('\n');
        } else {
            head.push_str(line);
            head.push('\n');
        }
    }
    File { head, sections }
}

fn write(file: &File) -> String {
    let mut out = file.head.clone();
    for (name, body) in &file.sections {
        let _ = writeln!(out, "== {name}");
        out.push_str(body);
    }
    out
}

fn spec(head: &str) -> Result<Spec, String> {
    let mut s = Spec::default();
    for line in head.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with(';')) {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        match word {
            "test" => s.directives.push(rest.to_string()),
            "expr" => s.expr = Some(rest.to_string()),
            "schedule" => s.schedule = Some(rest.to_string()),
            "contains" => s.contains.push(rest.to_string()),
            "lacks" => s.lacks.push(rest.to_string()),
            "size" => {
                let (v, n) = rest.split_once(' ').ok_or(format!("`{line}`: size VAR N"))?;
                s.sizes.push((v.to_string(), n.trim().parse().map_err(|e| format!("`{line}`: {e}"))?));
            }
            "tensor" => {
                let (name, rest) = rest.split_once(' ').ok_or(format!("`{line}`: tensor NAME [SHAPE] FORMAT"))?;
                let (shape, format) = rest
                    .strip_prefix('[')
                    .and_then(|r| r.split_once(']'))
                    .ok_or(format!("`{line}`: the shape in brackets"))?;
                let shape: Vec<usize> = shape
                    .split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(|d| d.parse().map_err(|e| format!("`{line}`: {e}")))
                    .collect::<Result<_, _>>()?;
                let format = match format.trim() {
                    "" => None,
                    f => Some(Format::parse(f, shape.len()).map_err(|e| format!("`{line}`: {e}"))?),
                };
                s.tensors.push((name.to_string(), shape, format));
            }
            _ => {
                // `A(0, 1) = 2.5`
                let entry = line.split_once('(').and_then(|(name, rest)| {
                    let (coords, value) = rest.split_once(')')?;
                    let coords = coords.split(',').map(|c| c.trim().parse().ok()).collect::<Option<Vec<usize>>>()?;
                    let value = value.trim().strip_prefix('=')?.trim().parse().ok()?;
                    Some((name.trim().to_string(), coords, value))
                });
                s.entries.push(entry.ok_or(format!("`{line}`: not a directive, a declaration or an entry"))?);
            }
        }
    }
    Ok(s)
}

/// The statement, checked, concretized and scheduled as the driver does.
fn concrete(s: &Spec) -> Result<(IndexNotation, Types, ConcreteNotation), String> {
    let stmt = parse(s.expr.as_deref().ok_or("no `expr`")?).map_err(|e| e.to_string())?;
    let mut decls = Declarations::new();
    for (name, shape, format) in &s.tensors {
        decls = decls.tensor(
            name,
            match format {
                Some(f) => TensorType::sparse(shape, f.clone()),
                None => TensorType::dense(shape),
            },
        );
    }
    for (v, n) in &s.sizes {
        decls = decls.index_size(v, *n);
    }
    let types = stmt.check(&decls).map_err(|e| e.to_string())?;
    let mut cin = concretize_for(&stmt, &types, &nm_lower::lower::LOOP_ORDER);
    cin.verify().map_err(|e| e.to_string())?;
    if let Some(schedule) = &s.schedule {
        let commands = parse_schedule(schedule).map_err(|e| e.to_string())?;
        cin = cin.schedule_sized(&commands, &types.sizes).map_err(|e| e.to_string())?;
    }
    Ok((stmt, types, cin))
}

/// The operands' tensors by tensor id (`None` for the result), from the file's entries.
fn operands(s: &Spec, stmt: &IndexNotation, result: &str) -> Result<Vec<Option<Tensor<f64>>>, String> {
    let mut out = Vec::new();
    for (_, t) in stmt.tensors.iter() {
        if t.name == result {
            out.push(None);
            continue;
        }
        let (_, shape, format) = s.tensors.iter().find(|d| d.0 == t.name).ok_or(format!("no `tensor {}`", t.name))?;
        let mut list = nm_format::CoordinateList::new(shape.clone());
        for (_, coords, value) in s.entries.iter().filter(|e| e.0 == t.name) {
            list.push(coords, *value);
        }
        let format = format.clone().unwrap_or_else(|| Format::dense(shape.len().max(1)));
        out.push(Some(Tensor::from_coordinates(&list, &format, Duplicates::Reject).map_err(|e| e.to_string())?));
    }
    Ok(out)
}

/// The result's stored entries, one per line (a dense result's nonzero elements).
fn entries(name: &str, t: &Tensor<f64>) -> String {
    let list = t.to_coordinates();
    let dense = t.format().levels().iter().all(|l| l.kind == nm_format::LevelKind::Dense);
    let mut out = String::new();
    for (e, value) in list.values.iter().enumerate() {
        if dense && *value == 0.0 {
            continue;
        }
        let coords: Vec<String> = list.coords.iter().map(|c| c[e].to_string()).collect();
        let _ = writeln!(out, "{name}({}) = {value}", coords.join(", "));
    }
    out
}

/// Runs the kernel on both back ends (and on row ranges) and prints what each computed.
fn run(s: &Spec, stmt: &IndexNotation, lowered: &Lowered) -> Result<String, String> {
    let result = &stmt.tensors[stmt.lhs.tensor].name;
    let (_, shape, format) = s.tensors.iter().find(|d| &d.0 == result).ok_or(format!("no `tensor {result}`"))?;
    let format = format.clone().unwrap_or_else(|| Format::dense(shape.len().max(1)));
    let tensors = operands(s, stmt, result)?;
    let by_id: Vec<Option<&Tensor<f64>>> = tensors.iter().map(Option::as_ref).collect();
    let len = shape.iter().product::<usize>().max(1);
    let mut outputs = Vec::new();
    let mut by_interp = arguments(lowered, &by_id, len).map_err(|e| e.to_string())?;
    interpret(&lowered.function, &mut by_interp).map_err(|e| e.to_string())?;
    outputs.push(("the interpreter".to_string(), by_interp));
    let cc = CCompiler::from_env().map_err(|e| e.to_string())?;
    let kernel = CKernel::compile(&lowered.function, &cc).map_err(|e| e.to_string())?;
    let mut by_c = arguments(lowered, &by_id, len).map_err(|e| e.to_string())?;
    kernel.run(&mut by_c).map_err(|e| e.to_string())?;
    outputs.push(("C".to_string(), by_c));
    if let Some(partition) = &lowered.partition {
        for threads in [2, 3] {
            let mut arrays = arguments(lowered, &by_id, len).map_err(|e| e.to_string())?;
            kernel.run_rows(&mut arrays, partition, threads).map_err(|e| e.to_string())?;
            outputs.push((format!("C on {threads} threads"), arrays));
        }
    }
    let mut printed: Vec<(String, String)> = Vec::new();
    for (by, arrays) in &outputs {
        let t: Tensor<f64> = result_tensor(lowered, arrays, shape, &format).map_err(|e| e.to_string())?;
        printed.push((by.clone(), entries(result, &t)));
    }
    if let Some((by, text)) = printed.iter().find(|(_, text)| *text != printed[0].1) {
        return Err(format!("{by} computed\n{text}where {} computed\n{}", printed[0].0, printed[0].1));
    }
    Ok(printed.swap_remove(0).1)
}

/// What `directive` gives for the file, as its section's text.
fn section(directive: &str, s: &Spec, file: &File) -> Result<String, String> {
    if directive == "verify" {
        let text = file.sections.iter().find(|(n, _)| n == "loops").map(|(_, t)| t).ok_or("no `== loops`")?;
        return Ok(match Function::parse(text) {
            Err(e) => format!("parse error: {e}\n"),
            Ok(f) => match f.verify() {
                Ok(()) => "ok\n".to_string(),
                Err(e) => format!("{e}\n"),
            },
        });
    }
    let (stmt, types, cin) = concrete(s)?;
    if directive == "concretize" {
        return Ok(format!("{cin}\n"));
    }
    let lowered = lower(&cin, &types, ElemType::F64).map_err(|e| e.to_string())?;
    match directive {
        "lower" => {
            let text = lowered.function.to_string();
            let parsed = Function::parse(&text).map_err(|e| format!("the printed loops do not parse: {e}"))?;
            if parsed.to_string() != text {
                return Err("the printed loops print differently once parsed".into());
            }
            for want in &s.contains {
                if !text.contains(want.as_str()) {
                    return Err(format!("the loops lack `{want}`:\n{text}"));
                }
            }
            for unwanted in &s.lacks {
                if text.contains(unwanted.as_str()) {
                    return Err(format!("the loops contain `{unwanted}`:\n{text}"));
                }
            }
            Ok(text)
        }
        "emit" => Ok(emit(&lowered.function)),
        "run" => run(s, &stmt, &lowered),
        other => Err(format!("unknown directive `test {other}`")),
    }
}

/// Checks one file (or rewrites its sections under `bless`); the failures, each naming it.
fn check_file(path: &Path, bless: bool) -> Vec<String> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut file = read(&text);
    let s = match spec(&file.head) {
        Ok(s) => s,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    if s.directives.is_empty() {
        return vec![format!("{name}: no `test` directive")];
    }
    let mut failures = Vec::new();
    for directive in &s.directives {
        let got = match section(directive, &s, &file) {
            Ok(got) => got,
            Err(e) => {
                failures.push(format!("{name}: test {directive}: {e}"));
                continue;
            }
        };
        let expected = file.sections.iter_mut().find(|(n, _)| n == directive);
        match (expected, bless) {
            (Some((_, body)), true) => *body = got,
            (None, true) => file.sections.push((directive.clone(), got)),
            (Some((_, body)), false) if *body == got => {}
            (Some((_, body)), false) => {
                let line = body.lines().zip(got.lines()).position(|(a, b)| a != b).unwrap_or(0);
                failures.push(format!(
                    "{name}: test {directive} differs, first at line {} of its section:\n  expected: {}\n  got:      {}",
                    line + 1,
                    body.lines().nth(line).unwrap_or("(nothing)"),
                    got.lines().nth(line).unwrap_or("(nothing)")
                ));
            }
            (None, false) => failures.push(format!("{name}: no `== {directive}` section (bless to write it)")),
        }
    }
    if bless {
        let _ = std::fs::write(path, write(&file));
    }
    failures
}

#[test]
fn file_tests() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let bless = std::env::var_os("NMSPARSE_BLESS").is_some();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "nmt"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no file tests in {}", dir.display());
    let failures: Vec<String> = paths.iter().flat_map(|p| check_file(p, bless)).collect();
    assert!(
        failures.is_empty(),
        "{} of the file tests failed (check the change, then NMSPARSE_BLESS=1 cargo test -p nm-lower --test filetests):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
