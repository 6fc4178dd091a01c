//! Random programs of public `try_` calls, shared by the `api_fuzz` test and the
//! `cargo fuzz` target `api` (which includes this directory by path).
//!
//! A case is drawn from a [`source::Draw`] (a seeded stream or the fuzzer's bytes):
//! it starts from constructors, or — in a `Func` case — from scope inputs with dynamic
//! dims (`shape![?0, 3]`), makes a few random calls whose arguments are valid for the
//! operand shapes most of the time and invalid otherwise (axes past the rank or
//! negative, ranges past the end, sizes that do not add up, mismatched operands,
//! every dtype), and evaluates a result or two on the compiled path and in the
//! oracle interpreter. [`case::Case::failures`] lists every property it broke: a
//! panic out of a `try_` call, a panic while evaluating, a value the oracle
//! disagrees with, or an `Ok` where the oracle gives `Err` (and the reverse).

pub mod case;
pub mod check;
pub mod leaves;
pub mod math;
pub mod nn;
pub mod shape_ops;
pub mod source;

use case::Case;
use rlx_tensor::GraphScope;
use source::Draw;

/// What a case may generate.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Also generate inputs that hit bugs known to be open (sizes whose allocation
    /// aborts the process, scalars past 2^53) — off in CI until their fixes land.
    pub known_bugs: bool,
    /// This case asks for huge sizes (element counts that overflow or could never be
    /// allocated): every such call must return `Err` (or a lazy `Ok` that is never
    /// evaluated) without allocating.
    pub huge: bool,
    /// Most calls in one case.
    pub max_steps: usize,
    /// Largest element count of a tensor that later calls may use or evaluate.
    pub max_elems: usize,
}

impl Config {
    /// The defaults of the CI test and the fuzz target.
    pub fn new(known_bugs: bool) -> Config {
        Config {
            known_bugs,
            huge: false,
            max_steps: 8,
            max_elems: 4096,
        }
    }
}

/// What kind of case ran (for the run's statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Constants only; results read with `try_to_data`.
    Static,
    /// Scope inputs with dynamic dims; results run through `Func::run_data`.
    Func,
    /// Constants and huge sizes.
    Huge,
}

/// The largest run-time size of a dynamic dim.
const DYN_MAX: usize = 8;

/// Generates and runs one case.
pub fn run_case(d: &mut Draw, cfg: &Config) -> (Kind, Case) {
    let kind = match d.below(100) {
        0..=54 => Kind::Static,
        55..=92 => Kind::Func,
        _ => Kind::Huge,
    };
    let cfg = Config {
        huge: kind == Kind::Huge,
        ..*cfg
    };
    let mut c = Case::new(cfg.max_elems, DYN_MAX);
    c.known_bugs = cfg.known_bugs;
    if kind == Kind::Func {
        c.preamble
            .push("let mut scope = GraphScope::new(\"fuzz\");".into());
        let mut scope = GraphScope::new("fuzz");
        leaves::scope_inputs(&mut c, d, &mut scope);
    } else {
        for _ in 0..1 + d.below(2) {
            leaves::constructor(&mut c, d, cfg.huge);
        }
    }
    let steps = 1 + d.below(cfg.max_steps);
    for _ in 0..steps {
        match d.below(20) {
            0..=8 => shape_ops::step(&mut c, d, &cfg),
            9..=15 => math::step(&mut c, d),
            16..=18 => nn::step(&mut c, d),
            _ => {
                leaves::constructor(&mut c, d, cfg.huge);
            }
        }
    }
    // Evaluate the newest usable result that a call produced, and now and then one more.
    let made: Vec<usize> = c
        .usable()
        .into_iter()
        .filter(|&s| !c.steps[c.slots[s].step].inputs.is_empty() || kind != Kind::Func)
        .collect();
    let mut targets: Vec<usize> = made.last().copied().into_iter().collect();
    if made.len() > 1 && d.percent(30) {
        targets.insert(0, d.pick(&made));
    }
    let sizes: Vec<usize> = (0..2)
        .map(|_| d.pick(&[0, 1, 1, 2, 3, 3, 4, 5, DYN_MAX]))
        .collect();
    for s in targets {
        match kind {
            Kind::Func => check::eval_func(&mut c, d, s, &sizes),
            _ => check::eval_static(&mut c, s),
        }
    }
    (kind, c)
}
