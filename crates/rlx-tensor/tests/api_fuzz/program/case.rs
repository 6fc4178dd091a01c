//! One generated case: the calls made so far, the tensors they returned, the failures
//! seen, and the minimal reproduction of a failure (the calls it depends on).

use rlx_tensor::{Dim, Error, Shape, Tensor};
use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    static IN_GUARD: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Installs (once) a panic hook that stays silent for panics inside [`guarded`] and
/// records their message and location instead; every other panic goes to the hook
/// that was there before (the test harness's, or libFuzzer's).
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_GUARD.with(|g| g.get()) {
                let loc = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let msg = payload_text(info.payload());
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{loc}")));
            } else {
                previous(info);
            }
        }));
    });
}

fn payload_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// Runs `f`, turning a panic into `Err(message at location)`.
pub fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install_panic_hook();
    IN_GUARD.with(|g| g.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    IN_GUARD.with(|g| g.set(false));
    r.map_err(|p| {
        LAST_PANIC
            .with(|l| l.borrow_mut().take())
            .unwrap_or_else(|| payload_text(p.as_ref()))
    })
}

/// Longest axis of a tensor that later calls may use (see [`Case::call`]).
const MAX_AXIS: usize = 1 << 16;

/// A tensor a call returned.
pub struct Slot {
    /// The tensor.
    pub t: Tensor,
    /// Its variable name in reproductions (`t3`).
    pub name: String,
    /// The step that made it.
    pub step: usize,
    /// Small enough to feed to more calls and to evaluate.
    pub usable: bool,
}

/// One call: its code, operands and what it returned.
pub struct Step {
    /// Rust source of the call (`let t3 = t1.try_narrow(0, 1, 2)?;`).
    pub code: String,
    /// Operand slots.
    pub inputs: Vec<usize>,
    /// `Ok: <shapes>` or `Err: <message>`.
    pub outcome: String,
}

/// A property the case violated.
pub struct Failure {
    /// Which property (`panic`, `mismatch`, …).
    pub kind: &'static str,
    /// What happened.
    pub message: String,
    /// The step at fault, if a call panicked.
    pub step: Option<usize>,
    /// Slots the failure involves (the evaluated tensors).
    pub slots: Vec<usize>,
}

/// The state of one case.
pub struct Case {
    /// Every tensor returned so far.
    pub slots: Vec<Slot>,
    /// Every call made so far.
    pub steps: Vec<Step>,
    /// Properties violated.
    pub failures: Vec<Failure>,
    /// Largest element count a usable tensor may have.
    pub max_elems: usize,
    /// Largest run-time size a dynamic dim is bound to (for the element estimate).
    pub dyn_max: usize,
    /// Calls that returned `Ok` / `Err`.
    pub oks: usize,
    /// Calls that returned `Err`.
    pub errs: usize,
    /// Lines of setup printed before the steps (e.g. the scope of a Func case).
    pub preamble: Vec<String>,
    /// Lines printed after the steps (how the result was evaluated).
    pub epilogue: Vec<String>,
    /// Generate inputs that hit known open bugs (see [`super::Config::known_bugs`]).
    pub known_bugs: bool,
    /// Evaluations where both paths returned a value / both returned an error.
    pub agreed: [usize; 2],
}

/// The static element count of `shape`, with dynamic dims counted as `dyn_max`;
/// `None` on overflow.
pub fn elems(shape: &Shape, dyn_max: usize) -> Option<usize> {
    shape.dims().iter().try_fold(1usize, |acc, d| {
        acc.checked_mul(match d {
            Dim::Static(n) => *n,
            Dim::Dynamic(_) => dyn_max,
        })
    })
}

impl Case {
    /// An empty case.
    pub fn new(max_elems: usize, dyn_max: usize) -> Case {
        Case {
            slots: Vec::new(),
            steps: Vec::new(),
            failures: Vec::new(),
            max_elems,
            dyn_max,
            oks: 0,
            errs: 0,
            preamble: Vec::new(),
            epilogue: Vec::new(),
            agreed: [0, 0],
            known_bugs: false,
        }
    }

    /// The variable name of slot `i`.
    pub fn name(&self, i: usize) -> String {
        self.slots[i].name.clone()
    }

    /// The tensor of slot `i`.
    pub fn t(&self, i: usize) -> &Tensor {
        &self.slots[i].t
    }

    /// The shape of slot `i`.
    pub fn shape(&self, i: usize) -> Shape {
        self.slots[i].t.shape()
    }

    /// Usable slots.
    pub fn usable(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].usable)
            .collect()
    }

    /// Adds a tensor made outside a call (a scope input), named `name`.
    pub fn add_leaf(&mut self, t: Tensor, code: String) -> usize {
        let step = self.steps.len();
        let id = self.slots.len();
        let name = format!("t{id}");
        self.steps.push(Step {
            code: format!("let {name} = {code};"),
            inputs: vec![],
            outcome: format!("Ok: {}", t.shape()),
        });
        self.slots.push(Slot {
            t,
            name,
            step,
            usable: true,
        });
        id
    }

    /// Makes one public call. `code` is the call's source with `?` or `unwrap` left
    /// out; `f` runs it on the operand tensors. A panic is recorded as a failure
    /// naming the call and the operand shapes; the returned tensors become new slots.
    pub fn call(
        &mut self,
        code: String,
        inputs: &[usize],
        f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>, Error>,
    ) -> Option<Vec<usize>> {
        let operands: Vec<Tensor> = inputs.iter().map(|&i| self.slots[i].t.clone()).collect();
        let step = self.steps.len();
        match guarded(|| f(&operands)) {
            Err(panic) => {
                let shapes: Vec<String> = inputs
                    .iter()
                    .map(|&i| format!("{}: {}", self.slots[i].name, self.slots[i].t.shape()))
                    .collect();
                self.steps.push(Step {
                    code: format!("{code};"),
                    inputs: inputs.to_vec(),
                    outcome: format!("PANIC: {panic}"),
                });
                self.failures.push(Failure {
                    kind: "panic in a try_ call",
                    message: format!("`{code}` panicked (operands {shapes:?}): {panic}"),
                    step: Some(step),
                    slots: vec![],
                });
                None
            }
            Ok(Err(e)) => {
                self.errs += 1;
                let msg = e.to_string();
                if msg.trim().is_empty() {
                    self.failures.push(Failure {
                        kind: "empty error message",
                        message: format!("`{code}` returned an error with no message"),
                        step: Some(step),
                        slots: vec![],
                    });
                }
                self.steps.push(Step {
                    code: format!("{code}.unwrap_err();"),
                    inputs: inputs.to_vec(),
                    outcome: format!("Err: {}", short(&msg, 160)),
                });
                None
            }
            Ok(Ok(ts)) => {
                self.oks += 1;
                let first = self.slots.len();
                let names: Vec<String> =
                    (first..first + ts.len()).map(|i| format!("t{i}")).collect();
                let shapes: Vec<String> = ts.iter().map(|t| t.shape().to_string()).collect();
                let lhs = if names.len() == 1 {
                    names[0].clone()
                } else {
                    format!("[{}]", names.join(", "))
                };
                let lhs = if names.is_empty() {
                    "_".to_string()
                } else {
                    lhs
                };
                self.steps.push(Step {
                    code: format!("let {lhs} = {code}?;"),
                    inputs: inputs.to_vec(),
                    outcome: format!("Ok: {}", shapes.join(", ")),
                });
                let mut ids = Vec::with_capacity(ts.len());
                for (t, name) in ts.into_iter().zip(names) {
                    // An empty tensor with a huge axis is small, but evaluating it hits
                    // a known open bug (the CPU pad kernel loops over the huge axis of
                    // an empty result): only with `known_bugs`.
                    let long_axis = t.shape().dims().iter().any(|d| match d {
                        Dim::Static(n) => *n > MAX_AXIS,
                        Dim::Dynamic(_) => false,
                    });
                    let usable = elems(&t.shape(), self.dyn_max)
                        .is_some_and(|n| n <= self.max_elems)
                        && t.rank() <= 6
                        && (self.known_bugs || !long_axis);
                    ids.push(self.slots.len());
                    self.slots.push(Slot {
                        t,
                        name,
                        step,
                        usable,
                    });
                }
                Some(ids)
            }
        }
    }

    /// The calls that `step` and `slots` depend on, as Rust source with each call's
    /// outcome in a comment: a minimal reproduction of a failure.
    pub fn repro(&self, step: Option<usize>, slots: &[usize]) -> String {
        let mut need = vec![false; self.steps.len()];
        let mut stack: Vec<usize> = step.into_iter().collect();
        stack.extend(slots.iter().map(|&s| self.slots[s].step));
        while let Some(s) = stack.pop() {
            if need[s] {
                continue;
            }
            need[s] = true;
            stack.extend(self.steps[s].inputs.iter().map(|&i| self.slots[i].step));
        }
        let mut out: Vec<String> = self.preamble.clone();
        for (i, s) in self.steps.iter().enumerate() {
            if need[i] {
                out.push(format!("{}  // {}", s.code, s.outcome));
            }
        }
        if step.is_none() {
            // The failure came from evaluating: say how.
            out.extend(self.epilogue.iter().cloned());
        }
        out.join("\n")
    }
}

/// `s` cut to `n` characters.
pub fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let cut: String = s.chars().take(n).collect();
        format!("{cut}…")
    }
}
