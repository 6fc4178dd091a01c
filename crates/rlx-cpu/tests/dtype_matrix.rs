//! The dtype matrix: every op × every dtype, compiled for the CPU and compared with the
//! oracle interpreter (`rlx_ir::interp`).
//!
//! For each case (one per op, and per activation / binary op / comparison / reduction /
//! cast target) and each dtype:
//! - if shape inference rejects the dtype, the error must name the op and the dtype;
//! - else if the oracle fails on the data (integer division by zero, a negative shift),
//!   the compiled program must fail too, naming the op;
//! - else the compiled program must succeed and agree with the oracle: exactly for
//!   integers and bool, within a few units in the last place of the dtype for floats
//!   (f16/bf16 are computed in f32 and rounded once on store; the oracle rounds an f64
//!   result once, so they may differ by one ulp of the narrow type).
//!
//! Coverage is enforced: `Op::VARIANT_NAMES` (kept beside the exhaustive
//! `Op::variant_name`) lists every variant, and the test fails if a variant is not
//! exercised by some case —
//! so a new op cannot be added without a row here.

mod dtype_matrix {
    pub mod cases;
    pub mod reduce_rows;
    pub mod rng;
    pub mod specials;
    pub mod views;
}

use dtype_matrix::cases::{self, Case, In};
use dtype_matrix::rng::Rng;
use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, DType, Graph, NodeId, Op, TensorData, interp};
use rlx_runtime::{Backend, Device, arg_order};
use std::collections::{BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

/// How one (case, dtype) cell came out.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    /// Compiled result equals the oracle's.
    Ok,
    /// Shape inference rejected the dtype (with this message).
    Rejected(String),
    /// The oracle and the compiled program both failed at run time.
    BothFail,
}

impl Cell {
    fn mark(&self) -> &'static str {
        match self {
            Cell::Ok => "ok",
            Cell::Rejected(_) => "--",
            Cell::BothFail => "er",
        }
    }
}

/// Relative tolerance (in units of `1 + |oracle|`) for a float dtype.
fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 | DType::C128 => 1e-10,
        DType::F32 | DType::C64 => 2e-5,
        // One ulp of the narrow type (f32 compute, rounded once on store) plus slack.
        DType::F16 => 2.0 * 2f64.powi(-10),
        DType::BF16 => 2.0 * 2f64.powi(-7),
        _ => 0.0,
    }
}

fn build(c: &Case, dt: DType, seed: u64) -> Result<(Graph, Vec<TensorData>), String> {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new(c.label.clone());
    let mut args = Vec::new();
    let mut ids: Vec<NodeId> = Vec::new();
    for (i, inp) in c.ins.iter().enumerate() {
        let name = format!("x{i}");
        let (data, kind) = match inp {
            In::D(dims) => (cases::random(&mut rng, dims, dt), 0),
            In::P(dims) => (cases::random(&mut rng, dims, dt), 1),
            In::C(dims) => (cases::random(&mut rng, dims, dt), 2),
            In::T(dims, fixed) => (cases::random(&mut rng, dims, *fixed), 0),
            In::G(f) => (f(dt, &mut rng), 0),
        };
        let id = match kind {
            0 => g.input(name, data.shape()),
            1 => g.param(name, data.shape()),
            _ => g.add_node(
                Op::Constant {
                    data: data.bytes.clone(),
                },
                vec![],
                data.shape(),
            ),
        };
        if kind != 2 {
            args.push(data);
        }
        ids.push(id);
    }
    let op = (c.op)(dt).map_err(|e| e.to_string())?;
    let y = g.add_op(op, ids).map_err(|e| e.to_string())?;
    g.set_outputs(vec![y]);
    Ok((g, args))
}

fn oracle(g: &Graph, args: &[TensorData]) -> Result<Vec<TensorData>, String> {
    let names: Vec<String> = arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    interp::run_refs(g, &named).map_err(|e| e.to_string())
}

fn compiled(g: &Graph, args: &[TensorData]) -> Result<Vec<TensorData>, String> {
    let exe = CpuBackend
        .compile(Device::Cpu, g)
        .map_err(|e| e.to_string())?;
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).map_err(|e| e.to_string())
}

fn compare(got: &TensorData, want: &TensorData, tol: f64) -> Result<(), String> {
    if got.dtype != want.dtype || got.dims != want.dims {
        return Err(format!(
            "result is {:?} {}, the oracle's {:?} {}",
            got.dims, got.dtype, want.dims, want.dtype
        ));
    }
    if !want.dtype.is_float() && !want.dtype.is_complex() {
        return if got.bytes == want.bytes {
            Ok(())
        } else {
            Err(format!(
                "got {:?}, oracle {:?}",
                got.to_i64_vec(),
                want.to_i64_vec()
            ))
        };
    }
    let tol = tolerance(want.dtype) * tol;
    for (i, (x, y)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let same = (x.is_nan() && y.is_nan()) || *x == y || (x - y).abs() <= tol * (1.0 + y.abs());
        if !same {
            return Err(format!(
                "element {i}: got {x}, oracle {y} (tolerance {tol:e})"
            ));
        }
    }
    Ok(())
}

/// Run one cell; `Err` describes a disagreement.
fn run_cell(c: &Case, dt: DType) -> Result<Cell, String> {
    let (g, args) = match build(c, dt, 7 + dt as u64) {
        Ok(x) => x,
        Err(msg) => return Ok(Cell::Rejected(msg)),
    };
    let want = oracle(&g, &args);
    let got = catch_unwind(AssertUnwindSafe(|| compiled(&g, &args)))
        .map_err(|p| format!("the CPU backend panicked: {}", panic_text(&p)))?;
    match (want, got) {
        (Ok(w), Ok(r)) => {
            compare(&r[0], &w[0], c.tol)?;
            Ok(Cell::Ok)
        }
        (Err(_), Err(e)) => {
            let name = g.node(g.outputs[0]).op.name();
            if e.contains(&name) {
                Ok(Cell::BothFail)
            } else {
                Err(format!(
                    "both fail, but the CPU error does not name `{name}`: {e}"
                ))
            }
        }
        (Ok(_), Err(e)) => Err(format!("the oracle succeeds but the CPU fails: {e}")),
        (Err(e), Ok(_)) => Err(format!("the oracle fails ({e}) but the CPU succeeds")),
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Every variant name used anywhere in `g` (scan bodies included).
fn variants_of(g: &Graph, out: &mut BTreeSet<&'static str>) {
    for n in g.nodes() {
        out.insert(n.op.variant_name());
        if let Op::Scan { body, .. } = &n.op {
            variants_of(body, out);
        }
    }
}

type Rows = Vec<(String, HashMap<DType, Cell>)>;

/// The whole matrix (computed once per test binary): `case label → dtype → cell`,
/// every disagreement, and the op variants the cases used.
fn run_matrix() -> &'static (Rows, Vec<String>, BTreeSet<&'static str>) {
    static M: OnceLock<(Rows, Vec<String>, BTreeSet<&'static str>)> = OnceLock::new();
    M.get_or_init(compute_matrix)
}

fn compute_matrix() -> (Rows, Vec<String>, BTreeSet<&'static str>) {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut covered = BTreeSet::new();
    for c in cases::all() {
        let mut row = HashMap::new();
        for dt in DType::ALL {
            if let Ok(Ok((g, _))) = catch_unwind(AssertUnwindSafe(|| build(&c, dt, 1))) {
                variants_of(&g, &mut covered);
            }
            match catch_unwind(AssertUnwindSafe(|| run_cell(&c, dt))) {
                Ok(Ok(cell)) => {
                    row.insert(dt, cell);
                }
                Ok(Err(e)) => failures.push(format!("{} × {dt}: {e}", c.label)),
                Err(p) => {
                    failures.push(format!("{} × {dt}: panicked: {}", c.label, panic_text(&p)))
                }
            }
        }
        rows.push((c.label.clone(), row));
    }
    (rows, failures, covered)
}

fn print_matrix(rows: &Rows) {
    let mut head = format!("{:<34}", "op \\ dtype");
    for dt in DType::ALL {
        head.push_str(&format!("{:>5}", dt.name()));
    }
    println!("{head}");
    for (label, row) in rows {
        let mut line = format!("{label:<34}");
        for dt in DType::ALL {
            line.push_str(&format!("{:>5}", row.get(&dt).map_or("FAIL", |c| c.mark())));
        }
        println!("{line}");
    }
}

#[test]
fn every_op_on_every_dtype_matches_the_oracle_or_is_rejected_by_name() {
    let (rows, failures, covered) = run_matrix();
    print_matrix(rows);
    let missing: Vec<&str> = Op::VARIANT_NAMES
        .iter()
        .copied()
        .filter(|v| !covered.contains(v))
        .collect();
    assert!(
        missing.is_empty(),
        "ops without a dtype-matrix case: {missing:?}; add a case to tests/dtype_matrix/cases.rs"
    );
    // Rejections must say which op and which dtype (the fix is checked per family in
    // `rejections_name_the_op_the_dtype_and_a_fix`).
    let mut bad_msgs = Vec::new();
    for (label, row) in rows.iter() {
        for (dt, cell) in row {
            if let Cell::Rejected(msg) = cell
                && !msg.contains(dt.name())
            {
                bad_msgs.push(format!("{label} × {dt}: `{msg}` does not name {dt}"));
            }
        }
    }
    let total: usize = rows.iter().map(|(_, r)| r.len()).sum();
    let ok = rows
        .iter()
        .flat_map(|(_, r)| r.values())
        .filter(|c| **c == Cell::Ok)
        .count();
    println!(
        "{} cases × {} dtypes: {ok} agree with the oracle, {} rejected or failing in both, {} disagreements",
        rows.len(),
        DType::ALL.len(),
        total - ok,
        failures.len()
    );
    assert!(
        failures.is_empty() && bad_msgs.is_empty(),
        "{} disagreements:\n{}\n{}",
        failures.len() + bad_msgs.len(),
        failures.join("\n"),
        bad_msgs.join("\n")
    );
}

/// The dtype support the issue promises, stated explicitly (so a regression that turns
/// an `ok` cell into a rejection fails here even if the oracle changed with it).
#[test]
fn promised_dtype_support_runs_on_the_cpu() {
    let (rows, _, _) = run_matrix();
    let cell = |label: &str, dt: DType| -> Option<Cell> {
        rows.iter()
            .find(|(l, _)| l == label)
            .and_then(|(_, r)| r.get(&dt).cloned())
    };
    let real: Vec<DType> = DType::ALL.into_iter().filter(|d| !d.is_complex()).collect();
    let ints: Vec<DType> = real.iter().copied().filter(|d| d.is_int()).collect();
    let floats = [DType::F32, DType::F64, DType::F16, DType::BF16];
    let mut missing = Vec::new();
    let mut want = |label: String, dt: DType| {
        if cell(&label, dt) != Some(Cell::Ok) {
            missing.push(format!("{label} × {dt}: {:?}", cell(&label, dt)));
        }
    };
    for &from in &real {
        for &to in &real {
            want(format!("cast_to_{to}"), from);
        }
        for c in ["eq", "ne", "lt", "le", "gt", "ge"] {
            want(c.to_string(), from);
        }
        for m in [
            "reshape",
            "transpose",
            "narrow",
            "concat",
            "broadcast_to",
            "pad",
            "gather",
            "where",
        ] {
            want(m.to_string(), from);
        }
    }
    for &dt in &ints {
        for b in [
            "add", "sub", "mul", "div", "rem", "maximum", "minimum", "pow", "bitand", "bitor",
            "bitxor", "shl", "shr",
        ] {
            want(b.to_string(), dt);
        }
        for r in [
            "reduce_sum",
            "reduce_max",
            "reduce_min",
            "reduce_prod",
            "cumsum",
            "argmax",
            "matmul",
        ] {
            want(r.to_string(), dt);
        }
        for a in [
            Activation::Neg,
            Activation::Abs,
            Activation::Relu,
            Activation::Sign,
        ] {
            want(a.name().to_string(), dt);
        }
    }
    for &dt in &floats {
        for a in Activation::ALL {
            want(a.name().to_string(), dt);
        }
        for l in [
            "add",
            "div",
            "pow",
            "atan2",
            "matmul",
            "linear",
            "softmax",
            "layer_norm",
            "attention",
            "reduce_mean",
            "round_to_format",
        ] {
            want(l.to_string(), dt);
        }
    }
    assert!(
        missing.is_empty(),
        "promised but not ok:\n{}",
        missing.join("\n")
    );
}

#[test]
fn rejections_name_the_op_the_dtype_and_a_fix() {
    let (rows, _, _) = run_matrix();
    let mut seen = 0;
    for (label, row) in rows.iter() {
        for (dt, cell) in row {
            let Cell::Rejected(msg) = cell else { continue };
            seen += 1;
            let lower = msg.to_lowercase();
            let names_fix = [
                "cast", "use ", "pass ", "build ", "compare ", "convert", "instead",
            ]
            .iter()
            .any(|w| lower.contains(w));
            assert!(
                names_fix,
                "{label} × {dt}: the rejection does not say how to fix it: {msg}"
            );
        }
    }
    assert!(seen > 50, "expected many rejected cells, saw {seen}");
}
