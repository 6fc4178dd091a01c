//! The fast path of `Func::train_step`: forward, backward and the optimizer update
//! compiled into one program.
//!
//! When the optimizer describes its update as data ([`Optimizer::fused`]), the
//! value-and-gradient graph is extended with the update arithmetic: every trained param
//! and every optimizer state buffer is an input, this step's operands (learning rate,
//! decays, bias corrections, the clipping bound) are runtime scalars, and the outputs are
//! `[loss, new params…, new state buffers…]`. The graph is built once per `Func` lineage,
//! `wrt` list and rule structure (memoized like the other derived functions) and compiled
//! once, so learning-rate schedules and the advancing step counter never recompile it.
//!
//! Per step, params and state are handed to the program in place (no copies in), the
//! gradients never leave it, and the results are written back: new params into the
//! returned `Func`, new state into the optimizer's own buffers. The step counter then
//! advances through [`Optimizer::end_iteration`], as on the host path.
//!
//! Parameter groups ([`rlx_optim::ParamGroup`]) give params their own learning rate and
//! decay: each param's update reads the runtime scalars of its group (named
//! `__opt.group<i>.<operand>`; params in no group read `__opt.<operand>`), set per step
//! from [`FusedUpdate::group_rule`], so a param gets exactly the operands its host `step`
//! would use. Which group each param falls in is part of the memo key.
//!
//! Global-norm clipping is computed in the program (f64 sum of squares, the host rule);
//! QAT runs the forward pass at the quantized copies (quantized on the host by the user's
//! closure) while the update reads and writes the f32 masters.

use crate::eval::Device;
use crate::func::Func;
use crate::{Error, Result};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};
use rlx_optim::{AdamCoeffs, FusedRule, FusedUpdate, Optimizer};
use std::collections::HashMap;

/// Prefix of every node the fused graph adds; graphs using it fall back to the host path.
const PREFIX: &str = "__opt.";

/// The quantizer of a QAT step (param name, static dims, data to quantize in place).
pub(crate) type Quant<'a> = &'a dyn Fn(&str, &[usize], &mut [f32]);

/// One trained param as the fused step sees it.
struct Trained<'a> {
    name: &'a str,
    dims: Vec<usize>,
    len: usize,
    /// Its parameter group (index into the optimizer's groups), `None` for none.
    group: Option<usize>,
}

impl Func {
    /// One training step through the compiled update, or `Ok(None)` when this step must
    /// take the host path (the optimizer has no fused rule, a trained param is not a
    /// static f32 tensor, or the device cannot compile the fused program).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn try_fused_step(
        &self,
        device: Option<Device>,
        opt: &mut dyn Optimizer,
        max_grad_norm: f32,
        quant: Option<Quant<'_>>,
        wrt: &[&str],
        inputs: &[(&str, &[f32])],
    ) -> Result<Option<(Func, Vec<f32>)>> {
        let Some(mut trained) = self.fusable(wrt) else {
            return Ok(None);
        };
        let clip = max_grad_norm > 0.0;
        let Some(mut fu) = opt.fused() else {
            return Ok(None);
        };
        assign_groups(&mut trained, &fu);
        let kinds = fu.state_kinds();
        let (fused, key) = self.fused_func(&trained, &fu, clip, quant.is_some(), wrt)?;
        let unsupported = |device: Device| format!("{key}#unsupported-on:{device}");
        let device = device.unwrap_or_else(|| crate::eval::fastest_device_for(fused.graph()));
        if self.has_derived(&unsupported(device))? {
            return Ok(None);
        }
        let prepared = fused.prepared();
        let compiled = match prepared.compiled(device) {
            Ok(c) => c,
            Err(_) => {
                // e.g. a backend without f64 arithmetic: remember, and use the host path.
                self.derived(&unsupported(device), || {
                    Ok(Func::from_graph_unchecked(Graph::new("-")))
                })?;
                return Ok(None);
            }
        };
        {
            let mut c = compiled.borrow_mut();
            for group in used_groups(&trained) {
                let (dtype, ops) = operands(fu.group_rule(group));
                for (operand, v) in ops {
                    let name = operand_input(group, operand);
                    // Operands the rule does not read here were pruned from the program.
                    if !c.slots().iter().any(|s| s.is_param && s.name == name) {
                        continue;
                    }
                    c.set_param(&name, TensorData::from_f64_as(dtype, &[], &[v]))
                        .map_err(|e| Error::from(e).context("train_step (fused)"))?;
                }
            }
            if clip {
                let bound = TensorData::from_f64(&[], &[max_grad_norm as f64]);
                c.set_param(CLIP_BOUND, bound)
                    .map_err(|e| Error::from(e).context("train_step (fused)"))?;
            }
        }

        // Forward params: the bound ones, or quantized copies of the trained ones (QAT).
        let quantized: Vec<(String, Vec<f32>)>;
        let params: &[(String, Vec<f32>)] = match quant {
            None => self.param_bindings(),
            Some(q) => {
                let mut run = self.param_bindings().to_vec();
                for (name, data) in run.iter_mut() {
                    if let Some(t) = trained.iter().find(|t| t.name == name) {
                        q(name, &t.dims, data);
                    }
                }
                quantized = run;
                &quantized
            }
        };
        // Existing state buffers are donated: the program writes each new value over
        // the old one (in place where the backend can) and hands the storage back as
        // the output. A param without state yet reads zeros (the optimizer's own
        // buffers are created only once the step has succeeded).
        let names: Vec<Vec<String>> = trained
            .iter()
            .map(|t| kinds.iter().map(|k| state_input(k, t.name)).collect())
            .collect();
        let masters_names: Vec<String> = trained.iter().map(|t| master_input(t.name)).collect();
        let has_state: Vec<bool> = trained.iter().map(|t| fu.state(t.name).is_some()).collect();
        let zeros: Vec<Vec<f32>> = (trained.iter().zip(&has_state))
            .filter(|(_, has)| !**has)
            .map(|(t, _)| vec![0.0; t.len])
            .collect();
        let mut lent: Vec<(usize, Vec<Vec<f32>>)> = Vec::new();
        for (i, t) in trained.iter().enumerate().filter(|(i, _)| has_state[*i]) {
            let bufs = fu.state_mut(t.name, t.len);
            lent.push((i, bufs.iter_mut().map(std::mem::take).collect()));
        }
        let ran = {
            let mut all: Vec<(&str, &[f32])> = inputs.to_vec();
            let mut z = zeros.iter();
            for (names, has) in names.iter().zip(&has_state) {
                if !has {
                    let zero = z.next().expect("one zero buffer per stateless param");
                    for n in names {
                        all.push((n, zero));
                    }
                }
            }
            if quant.is_some() {
                for (n, t) in masters_names.iter().zip(&trained) {
                    let master = self
                        .param_binding(t.name)
                        .expect("checked bound by the caller");
                    all.push((n, master));
                }
            }
            // Output order: loss, new params, then the state buffers param by param.
            let mut donated: Vec<(&str, &mut Vec<f32>, usize)> = Vec::new();
            for (i, bufs) in lent.iter_mut() {
                for (j, (n, b)) in names[*i].iter().zip(bufs.iter_mut()).enumerate() {
                    donated.push((n, b, 1 + trained.len() + *i * kinds.len() + j));
                }
            }
            let what = format!("Func `{}` train_step", self.graph().name);
            // f32 results come back as the backend's own `Vec<f32>`s (no copy on the
            // CPU), and are moved on below: into the next Func and the optimizer.
            crate::exec::run_f32_host_donating(
                what.as_str().into(),
                &compiled.borrow(),
                prepared,
                params,
                &all,
                &mut donated,
            )
        };
        let outs = match ran {
            Ok(outs) => outs,
            Err(e) => {
                // The donated buffers are back in `lent` (values unspecified if kernels
                // ran): return them to the optimizer, whose state stays as it was.
                for (i, bufs) in lent {
                    fu.set_state(trained[i].name, bufs);
                }
                return Err(e);
            }
        };

        let mut outs = outs.into_iter();
        let loss = outs.next().expect("loss output");
        let updates = trained
            .iter()
            .map(|t| (t.name, outs.next().expect("one output per trained param")))
            .collect();
        let next = self.with_updated_params(updates);
        for t in &trained {
            let bufs: Vec<Vec<f32>> = (0..kinds.len())
                .map(|_| outs.next().expect("one output per state buffer"))
                .collect();
            debug_assert!(
                bufs.iter().all(|b| b.len() == t.len),
                "state of `{}`",
                t.name
            );
            fu.set_state(t.name, bufs);
            fu.note_param(t.name, &t.dims);
        }
        let _ = fu; // the borrow of `opt` ends here
        opt.end_iteration();
        Ok(Some((next, loss)))
    }

    /// The fused step's function (memoized per lineage, `wrt`, rule structure, each
    /// param's group, clipping and QAT) and its memo key.
    fn fused_func(
        &self,
        trained: &[Trained<'_>],
        fu: &FusedUpdate<'_>,
        clip: bool,
        qat: bool,
        wrt: &[&str],
    ) -> Result<(Func, String)> {
        let groups = if trained.iter().all(|t| t.group.is_none()) {
            String::new()
        } else {
            let each: Vec<String> = trained
                .iter()
                .map(|t| t.group.map_or("-".into(), |i| i.to_string()))
                .collect();
            format!(":groups={}", each.join(","))
        };
        let key = format!(
            "train_fused:{}:clip={clip}:qat={qat}{groups}:{}",
            fu.rule.structure(),
            wrt.join("\u{1f}")
        );
        let fused = self.derived(&key, || {
            let vg = self.value_and_grad_for(wrt)?;
            build(vg.graph(), trained, fu, clip, qat).map(Func::from_graph_unchecked)
        })?;
        Ok((fused, key))
    }

    /// What the compiler does with the compiled training step of `wrt` under `opt` on the
    /// default device (its kernels, fusion and memory plan), or why `train_step` would
    /// take the host path instead. Does not step or change `opt`'s state.
    ///
    /// ```
    /// use rlx_tensor::{shape, AdamW, Func, Muon};
    /// let f = Func::new("quad", |s| {
    ///     let w = s.param("w", shape![3]);
    ///     (&w * &w).sum_all()
    /// })
    /// .with_param("w", vec![1.0, 2.0, 3.0]);
    /// assert!(f.explain_train_step(&mut AdamW::new(0.1), &["w"]).contains("quad_value_and_grad_fused_step"));
    /// assert!(f.explain_train_step(&mut Muon::new(0.1), &["w"]).contains("host path"));
    /// ```
    pub fn explain_train_step(&self, opt: &mut dyn Optimizer, wrt: &[&str]) -> String {
        let Some(mut trained) = self.fusable(wrt) else {
            return "host path: a trained param is not a distinct static f32 param (or a name starts with `__opt.`)".into();
        };
        let Some(fu) = opt.fused() else {
            return "host path: this optimizer has no fused rule (Optimizer::fused returned None)"
                .into();
        };
        assign_groups(&mut trained, &fu);
        match self.fused_func(&trained, &fu, false, false, wrt) {
            Ok((f, _)) => f.explain(),
            Err(e) => format!("host path: cannot build the fused step: {e}"),
        }
    }

    /// Whether a derived function is memoized under `key` (used as a marker).
    fn has_derived(&self, key: &str) -> Result<bool> {
        Ok(self.derived(key, || Err(Error::new("absent"))).is_ok())
    }

    /// The trained params when every one is a distinct, statically shaped f32 param and
    /// no name collides with the fused graph's own inputs.
    fn fusable<'a>(&self, wrt: &[&'a str]) -> Option<Vec<Trained<'a>>> {
        let g = self.graph();
        if g.param_names()
            .iter()
            .chain(g.input_names().iter())
            .any(|n| n.starts_with(PREFIX))
        {
            return None;
        }
        let mut out = Vec::with_capacity(wrt.len());
        for (i, &name) in wrt.iter().enumerate() {
            if wrt[..i].contains(&name) {
                return None;
            }
            let shape = g.shape(g.param_id(name)?);
            if shape.dtype() != DType::F32 {
                return None;
            }
            let dims = shape.static_dims()?;
            out.push(Trained {
                name,
                len: dims.iter().product(),
                dims,
                group: None,
            });
        }
        Some(out)
    }
}

/// Sets each trained param's group, as the optimizer's host `step` resolves it.
fn assign_groups(trained: &mut [Trained<'_>], fu: &FusedUpdate<'_>) {
    for t in trained.iter_mut() {
        t.group = fu.group_index(t.name, &t.dims);
    }
}

/// The distinct groups of the trained params, in first-use order.
fn used_groups(trained: &[Trained<'_>]) -> Vec<Option<usize>> {
    let mut used = Vec::new();
    for t in trained {
        if !used.contains(&t.group) {
            used.push(t.group);
        }
    }
    used
}

/// The runtime scalar holding `operand` for the params of `group`.
fn operand_input(group: Option<usize>, operand: &str) -> String {
    match group {
        None => format!("{PREFIX}{operand}"),
        Some(i) => format!("{PREFIX}group{i}.{operand}"),
    }
}

/// The input holding state buffer `kind` of param `name`.
fn state_input(kind: &str, name: &str) -> String {
    format!("{PREFIX}{kind}/{name}")
}

/// The input holding the f32 master of param `name` (QAT).
fn master_input(name: &str) -> String {
    format!("{PREFIX}master/{name}")
}

/// The clipping bound (runtime f64 scalar).
const CLIP_BOUND: &str = "__opt.max_grad_norm";

/// The runtime scalar operands of `rule`, by operand name (see [`operand_input`]), and the
/// dtype they are computed in.
fn operands(rule: &FusedRule) -> (DType, Vec<(&'static str, f64)>) {
    // Decoupled decay (AdamW) scales p by `1 − lr·wd`; Adam adds `wd·p` to the gradient.
    let adam = |c: &AdamCoeffs, f32_math: bool, decoupled: bool| {
        let [step_size, inv_sqrt_bc2, decay] = c.step_scalars(f32_math);
        vec![
            ("beta1", c.beta1),
            ("one_minus_beta1", c.one_minus_beta1),
            ("beta2", c.beta2),
            ("one_minus_beta2", c.one_minus_beta2),
            ("step_size", step_size),
            ("inv_sqrt_bc2", inv_sqrt_bc2),
            ("eps", c.eps),
            if decoupled {
                ("decay", decay)
            } else {
                ("weight_decay", c.weight_decay)
            },
        ]
    };
    let dt = |f32_math: bool| if f32_math { DType::F32 } else { DType::F64 };
    match *rule {
        FusedRule::Sgd {
            lr,
            momentum,
            weight_decay,
            ..
        } => (
            DType::F32,
            vec![
                ("lr", lr as f64),
                ("momentum", momentum as f64),
                ("weight_decay", weight_decay as f64),
            ],
        ),
        FusedRule::Adam { f32_math, ref c } => (dt(f32_math), adam(c, f32_math, false)),
        FusedRule::AdamW { f32_math, ref c } => (dt(f32_math), adam(c, f32_math, true)),
        FusedRule::AdamWTorch {
            decay,
            lerp_weight,
            one_minus_lerp_weight,
            beta2,
            one_minus_beta2,
            bias_correction2_sqrt,
            eps,
            neg_step_size,
        } => (
            DType::F64,
            vec![
                ("decay", decay),
                ("lerp_weight", lerp_weight),
                ("one_minus_lerp_weight", one_minus_lerp_weight),
                ("beta2", beta2),
                ("one_minus_beta2", one_minus_beta2),
                ("bias_correction2_sqrt", bias_correction2_sqrt),
                ("eps", eps),
                ("neg_step_size", neg_step_size),
            ],
        ),
        FusedRule::Lion {
            lr,
            beta1,
            one_minus_beta1,
            beta2,
            one_minus_beta2,
            weight_decay,
        } => (
            DType::F32,
            vec![
                ("lr", lr as f64),
                ("beta1", beta1 as f64),
                ("one_minus_beta1", one_minus_beta1 as f64),
                ("beta2", beta2 as f64),
                ("one_minus_beta2", one_minus_beta2 as f64),
                ("weight_decay", weight_decay as f64),
            ],
        ),
    }
}

/// Appends ops to the fused graph, turning IR errors into messages naming the step.
struct B {
    g: Graph,
}

impl B {
    fn op(&mut self, op: Op, inputs: Vec<NodeId>) -> Result<NodeId> {
        self.g
            .add_op(op, inputs)
            .map_err(|e| Error::from(e).context("train_step (fused update)"))
    }
    fn bin(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.op(Op::Binary(op), vec![a, b])
    }
    fn add(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.bin(BinaryOp::Add, a, b)
    }
    fn sub(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.bin(BinaryOp::Sub, a, b)
    }
    fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.bin(BinaryOp::Mul, a, b)
    }
    fn div(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.bin(BinaryOp::Div, a, b)
    }
    fn act(&mut self, a: Activation, x: NodeId) -> Result<NodeId> {
        self.op(Op::Activation(a), vec![x])
    }
    fn cast(&mut self, x: NodeId, to: DType) -> Result<NodeId> {
        if self.g.shape(x).dtype() == to {
            return Ok(x);
        }
        self.op(Op::Cast { to }, vec![x])
    }
    fn select(&mut self, mask: NodeId, t: NodeId, f: NodeId) -> Result<NodeId> {
        self.op(Op::Where, vec![mask, t, f])
    }
    fn cmp(&mut self, op: CmpOp, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.op(Op::Compare(op), vec![a, b])
    }
    fn constant(&mut self, v: f64, dt: DType) -> NodeId {
        let data = TensorData::from_f64_as(dt, &[], &[v]);
        self.g.add_node(
            Op::Constant { data: data.bytes },
            Vec::new(),
            Shape::scalar(dt),
        )
    }
    /// A rank-0 runtime operand, bound on the compiled graph before each run.
    fn scalar(&mut self, name: &str, dt: DType) -> NodeId {
        self.g.param(name, Shape::scalar(dt))
    }
}

/// The fused graph: `vg` (outputs `[loss, grads…]`) plus the update of every trained
/// param, each under its group's rule. Outputs `[loss, new params…, new state…]` (state
/// grouped by param, in `fu.state_kinds()` order).
fn build(
    vg: &Graph,
    trained: &[Trained<'_>],
    fu: &FusedUpdate<'_>,
    clip: bool,
    qat: bool,
) -> Result<Graph> {
    let kinds = fu.state_kinds();
    let loss = vg.outputs[0];
    let mut grads: Vec<NodeId> = vg.outputs[1..].to_vec();
    let mut b = B { g: vg.clone() };
    b.g.name = format!("{}_fused_step", vg.name);
    if clip {
        grads = clip_grads(&mut b, &grads)?;
    }
    // One set of runtime scalars per group in use.
    let mut scalars: HashMap<Option<usize>, HashMap<&'static str, NodeId>> = HashMap::new();
    for group in used_groups(trained) {
        let (dt, ops) = operands(fu.group_rule(group));
        let ids = ops
            .iter()
            .map(|&(operand, _)| (operand, b.scalar(&operand_input(group, operand), dt)))
            .collect();
        scalars.insert(group, ids);
    }
    let mut new_params = Vec::with_capacity(trained.len());
    let mut new_state = Vec::new();
    for (t, &g) in trained.iter().zip(&grads) {
        let shape = Shape::new(&t.dims, DType::F32);
        let p = if qat {
            b.g.input(master_input(t.name), shape.clone())
        } else {
            b.g.param_id(t.name).expect("trained params are declared")
        };
        let state: Vec<NodeId> = kinds
            .iter()
            .map(|k| b.g.input(state_input(k, t.name), shape.clone()))
            .collect();
        let rule = fu.group_rule(t.group);
        let (p2, st2) = update(&mut b, rule, &scalars[&t.group], p, g, &state)?;
        new_params.push(p2);
        new_state.extend(st2);
    }
    let mut outs = vec![loss];
    outs.extend(new_params);
    outs.extend(new_state);
    b.g.set_outputs(outs);
    Ok(b.g)
}

/// Global-norm clipping in the program, the host rule: `‖g‖` summed in f64; when it is
/// finite and above the bound every gradient is multiplied by `(bound/‖g‖) as f32`.
fn clip_grads(b: &mut B, grads: &[NodeId]) -> Result<Vec<NodeId>> {
    let mut total: Option<NodeId> = None;
    for &g in grads {
        let g64 = b.cast(g, DType::F64)?;
        let sq = b.mul(g64, g64)?;
        let rank = b.g.shape(sq).rank();
        let part = if rank == 0 {
            sq
        } else {
            b.op(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: (0..rank).collect(),
                    keep_dim: false,
                },
                vec![sq],
            )?
        };
        total = Some(match total {
            Some(t) => b.add(t, part)?,
            None => part,
        });
    }
    let Some(total) = total else {
        return Ok(Vec::new());
    };
    let norm = b.act(Activation::Sqrt, total)?;
    let bound = b.scalar(CLIP_BOUND, DType::F64);
    let inf = b.constant(f64::INFINITY, DType::F64);
    let one = b.constant(1.0, DType::F64);
    let above = b.cmp(CmpOp::Gt, norm, bound)?;
    let finite = b.cmp(CmpOp::Lt, norm, inf)?;
    let ratio = b.div(bound, norm)?;
    let inner = b.select(finite, ratio, one)?;
    let scale = b.select(above, inner, one)?;
    let scale = b.cast(scale, DType::F32)?;
    grads.iter().map(|&g| b.mul(g, scale)).collect()
}

/// The new param and state of one trained param under `rule` (the formulas of
/// [`FusedRule`], in the host `step`'s operation order).
fn update(
    b: &mut B,
    rule: &FusedRule,
    s: &HashMap<&'static str, NodeId>,
    p: NodeId,
    g: NodeId,
    state: &[NodeId],
) -> Result<(NodeId, Vec<NodeId>)> {
    let k = |n: &str| s[n];
    match *rule {
        FusedRule::Sgd {
            momentum, nesterov, ..
        } => {
            let (lr, mu, wd) = (k("lr"), k("momentum"), k("weight_decay"));
            let wp = b.mul(wd, p)?;
            let d = b.add(g, wp)?;
            if momentum == 0.0 {
                let step = b.mul(lr, d)?;
                return Ok((b.sub(p, step)?, Vec::new()));
            }
            let mv = b.mul(mu, state[0])?;
            let v = b.add(mv, d)?;
            let u = if nesterov {
                let mv2 = b.mul(mu, v)?;
                b.add(d, mv2)?
            } else {
                v
            };
            let step = b.mul(lr, u)?;
            Ok((b.sub(p, step)?, vec![v]))
        }
        FusedRule::Adam { f32_math, .. } | FusedRule::AdamW { f32_math, .. } => {
            let decoupled = matches!(rule, FusedRule::AdamW { .. });
            let dt = if f32_math { DType::F32 } else { DType::F64 };
            let (pw, gw) = (b.cast(p, dt)?, b.cast(g, dt)?);
            let (mw, vw) = (b.cast(state[0], dt)?, b.cast(state[1], dt)?);
            let g2 = if decoupled {
                gw
            } else {
                let wp = b.mul(k("weight_decay"), pw)?;
                b.add(gw, wp)?
            };
            let bm = b.mul(k("beta1"), mw)?;
            let cg = b.mul(k("one_minus_beta1"), g2)?;
            let m = b.add(bm, cg)?;
            let bv = b.mul(k("beta2"), vw)?;
            let cg = b.mul(k("one_minus_beta2"), g2)?;
            let cgg = b.mul(cg, g2)?;
            let v = b.add(bv, cgg)?;
            let root = b.act(Activation::Sqrt, v)?;
            let scaled = b.mul(root, k("inv_sqrt_bc2"))?;
            let denom = b.add(scaled, k("eps"))?;
            let num = b.mul(k("step_size"), m)?;
            let step = b.div(num, denom)?;
            let p1 = if decoupled {
                b.mul(pw, k("decay"))?
            } else {
                pw
            };
            let p2 = b.sub(p1, step)?;
            Ok((
                b.cast(p2, DType::F32)?,
                vec![b.cast(m, DType::F32)?, b.cast(v, DType::F32)?],
            ))
        }
        FusedRule::AdamWTorch { lerp_weight, .. } => {
            let f = DType::F64;
            let (pw, gw) = (b.cast(p, f)?, b.cast(g, f)?);
            let (mw, vw) = (b.cast(state[0], f)?, b.cast(state[1], f)?);
            let p1 = b.mul(pw, k("decay"))?;
            let diff = b.sub(gw, mw)?;
            let m = if lerp_weight.abs() < 0.5 {
                let step = b.mul(k("lerp_weight"), diff)?;
                b.add(mw, step)?
            } else {
                let back = b.mul(diff, k("one_minus_lerp_weight"))?;
                b.sub(gw, back)?
            };
            let vb = b.mul(vw, k("beta2"))?;
            let cg = b.mul(k("one_minus_beta2"), gw)?;
            let cgg = b.mul(cg, gw)?;
            let v = b.add(vb, cgg)?;
            let root = b.act(Activation::Sqrt, v)?;
            let scaled = b.div(root, k("bias_correction2_sqrt"))?;
            let denom = b.add(scaled, k("eps"))?;
            let num = b.mul(k("neg_step_size"), m)?;
            let step = b.div(num, denom)?;
            let p2 = b.add(p1, step)?;
            Ok((
                b.cast(p2, DType::F32)?,
                vec![b.cast(m, DType::F32)?, b.cast(v, DType::F32)?],
            ))
        }
        FusedRule::Lion { .. } => {
            let m = state[0];
            let bm = b.mul(k("beta1"), m)?;
            let cg = b.mul(k("one_minus_beta1"), g)?;
            let c = b.add(bm, cg)?;
            // sign(0) = 0 and NaN passes through (the IR's sign maps NaN to 0).
            let sign = b.act(Activation::Sign, c)?;
            let nan = b.cmp(CmpOp::Ne, c, c)?;
            let sign = b.select(nan, c, sign)?;
            let wp = b.mul(k("weight_decay"), p)?;
            let dir = b.add(sign, wp)?;
            let step = b.mul(k("lr"), dir)?;
            let p2 = b.sub(p, step)?;
            let bm2 = b.mul(k("beta2"), m)?;
            let cg2 = b.mul(k("one_minus_beta2"), g)?;
            let m2 = b.add(bm2, cg2)?;
            Ok((p2, vec![m2]))
        }
    }
}
