//! Per-parameter state storage shared by the optimizers, and its conversion to and from
//! [`OptimizerState`].

use std::collections::HashMap;

use crate::OptimizerState;

/// `K` state buffers per parameter name (Adam: m and v; the others: one momentum
/// buffer), created zero-filled on first use.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slots<const K: usize> {
    map: HashMap<String, [Vec<f32>; K]>,
}

impl<const K: usize> Slots<K> {
    pub(crate) fn new() -> Self {
        Slots {
            map: HashMap::new(),
        }
    }

    /// The buffers of `name`, zero-initialized with `len` values on first use.
    ///
    /// Panics if `name` already has state of a different length: silently resetting
    /// would hide a name clash between two differently sized params.
    #[track_caller]
    pub(crate) fn get_or_zero(
        &mut self,
        optimizer: &str,
        name: &str,
        len: usize,
    ) -> &mut [Vec<f32>; K] {
        if !self.map.contains_key(name) {
            self.map
                .insert(name.to_string(), std::array::from_fn(|_| vec![0.0; len]));
        }
        let slots = self.map.get_mut(name).expect("inserted above");
        let have = slots.first().map_or(len, Vec::len);
        if have != len {
            panic!(
                "{optimizer}::step: {}",
                crate::state_size_mismatch(name, have, len)
            );
        }
        slots
    }

    /// The length of `name`'s buffers, if it has state.
    pub(crate) fn len_of(&self, name: &str) -> Option<usize> {
        self.map.get(name).and_then(|b| b.first()).map(Vec::len)
    }

    /// Forget every param's state.
    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }

    /// Replace the buffers of `name` (created if it had none).
    pub(crate) fn set(&mut self, name: &str, bufs: [Vec<f32>; K]) {
        self.map.insert(name.to_string(), bufs);
    }

    /// The buffers of `name`, if it has state.
    pub(crate) fn get(&self, name: &str) -> Option<&[Vec<f32>; K]> {
        self.map.get(name)
    }

    /// Snapshot as `"<prefix>/<name>"` buffers, grouped by param in ascending name order.
    pub(crate) fn export(&self, step: u64, prefixes: [&str; K]) -> OptimizerState {
        let mut names: Vec<&String> = self.map.keys().collect();
        names.sort();
        let mut buffers = Vec::with_capacity(names.len() * K);
        for name in names {
            for (prefix, buf) in prefixes.iter().zip(&self.map[name]) {
                buffers.push((format!("{prefix}/{name}"), buf.clone()));
            }
        }
        OptimizerState {
            step,
            buffers,
            param_groups: Vec::new(),
        }
    }

    /// Rebuild slots from a snapshot; `Err` says why it does not fit: a buffer name
    /// without a known `<kind>/` prefix, a buffer listed twice, or a param lacking one of
    /// its `K` buffers or having buffers of different lengths.
    pub(crate) fn import(state: &OptimizerState, prefixes: [&str; K]) -> Result<Self, String> {
        let mut partial: HashMap<String, [Option<Vec<f32>>; K]> = HashMap::new();
        for (full, values) in &state.buffers {
            let unknown = || {
                format!(
                    "buffer `{full}` is not one this optimizer keeps (its buffers are named \
                     `<kind>/<param>` with kind one of {prefixes:?})"
                )
            };
            let (prefix, name) = full.split_once('/').ok_or_else(unknown)?;
            let kind = prefixes
                .iter()
                .position(|p| *p == prefix)
                .ok_or_else(unknown)?;
            let entry = partial
                .entry(name.to_string())
                .or_insert_with(|| std::array::from_fn(|_| None));
            if entry[kind].is_some() {
                return Err(format!("buffer `{full}` is listed twice"));
            }
            entry[kind] = Some(values.clone());
        }
        let mut map = HashMap::with_capacity(partial.len());
        for (name, bufs) in partial {
            if let Some(k) = bufs.iter().position(Option::is_none) {
                return Err(format!(
                    "param `{name}` lacks its `{}/` buffer",
                    prefixes[k]
                ));
            }
            let bufs: [Vec<f32>; K] = bufs.map(|b| b.expect("checked above"));
            if bufs.iter().any(|b| b.len() != bufs[0].len()) {
                let lens: Vec<usize> = bufs.iter().map(Vec::len).collect();
                return Err(format!(
                    "the buffers of param `{name}` differ in length ({prefixes:?}: {lens:?})"
                ));
            }
            map.insert(name, bufs);
        }
        Ok(Slots { map })
    }
}

/// The [`Optimizer`](crate::Optimizer) methods every optimizer here implements the same
/// way, for use inside `impl Optimizer for …` of a struct with a `step: u64` counter, a
/// `groups: ParamGroups` field and the [`Slots`] field `$slots`: `end_iteration` advances
/// the counter; `lr_scale` reports the param's group multiplier; `state_dict` exports the
/// slots under the buffer-name `$prefixes` plus the params' resolved groups;
/// `try_load_state_dict` / `load_state_dict` replace all of it from a snapshot (leaving
/// everything unchanged when the snapshot does not fit); `state_len` reports a param's
/// buffer length and `reset_state` forgets every param. `$optimizer` names the optimizer
/// in messages.
macro_rules! iteration_and_state_methods {
    ($optimizer:literal, $slots:ident, $prefixes:expr) => {
        fn end_iteration(&mut self) {
            self.step += 1;
        }

        fn lr_scale(&self, name: &str) -> f32 {
            self.groups.lr_scale_of(name)
        }

        fn state_dict(&self) -> Option<$crate::OptimizerState> {
            let mut state = self.$slots.export(self.step, $prefixes);
            state.param_groups = self.groups.export();
            Some(state)
        }

        fn load_state_dict(&mut self, state: &$crate::OptimizerState) -> bool {
            self.try_load_state_dict(state).is_ok()
        }

        fn try_load_state_dict(&mut self, state: &$crate::OptimizerState) -> Result<(), String> {
            let slots = $crate::state::Slots::import(state, $prefixes).map_err(|e| {
                format!(
                    "{}::load_state_dict: the state does not fit: {e}; load a state saved by \
                     a {} (nothing was changed)",
                    $optimizer, $optimizer
                )
            })?;
            let shapes = self.groups.check_import($optimizer, &state.param_groups)?;
            self.$slots = slots;
            self.groups.set_shapes(shapes);
            self.step = state.step;
            Ok(())
        }

        fn state_len(&self, name: &str) -> Option<usize> {
            self.$slots.len_of(name)
        }

        fn reset_state(&mut self) -> bool {
            self.$slots.clear();
            self.groups.forget_params();
            self.step = 0;
            true
        }
    };
}
pub(crate) use iteration_and_state_methods;

#[cfg(test)]
mod tests {
    use super::*;

    fn state(buffers: &[(&str, &[f32])]) -> OptimizerState {
        OptimizerState {
            step: 7,
            buffers: buffers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_vec()))
                .collect(),
            param_groups: Vec::new(),
        }
    }

    #[test]
    fn export_groups_by_param_in_name_order() {
        let mut s = Slots::<2>::new();
        s.get_or_zero("T", "z", 1)[0][0] = 1.0;
        s.get_or_zero("T", "a/b", 2)[1][1] = 2.0;
        let out = s.export(3, ["m", "v"]);
        assert_eq!(
            out,
            state(&[
                ("m/a/b", &[0.0, 0.0]),
                ("v/a/b", &[0.0, 2.0]),
                ("m/z", &[1.0]),
                ("v/z", &[0.0]),
            ])
            .with_step(3)
        );
        let back = Slots::<2>::import(&out, ["m", "v"]).unwrap();
        assert_eq!(back.export(3, ["m", "v"]), out);
    }

    #[test]
    fn import_rejects_unknown_prefix_duplicates_missing_and_ragged_buffers() {
        let p = ["m", "v"];
        let err = |b: &[(&str, &[f32])]| Slots::<2>::import(&state(b), p).err().unwrap();
        assert!(Slots::<2>::import(&state(&[("m/w", &[1.0]), ("v/w", &[2.0])]), p).is_ok());
        let e = err(&[("x/w", &[1.0]), ("v/w", &[2.0])]);
        assert!(
            e.contains("buffer `x/w` is not one this optimizer keeps"),
            "{e}"
        );
        assert!(e.contains(r#"["m", "v"]"#), "{e}");
        assert!(err(&[("mw", &[1.0])]).contains("buffer `mw` is not one"));
        assert_eq!(err(&[("m/w", &[1.0])]), "param `w` lacks its `v/` buffer");
        assert_eq!(
            err(&[("m/w", &[1.0]), ("m/w", &[1.0]), ("v/w", &[1.0])]),
            "buffer `m/w` is listed twice"
        );
        assert_eq!(
            err(&[("m/w", &[1.0]), ("v/w", &[1.0, 2.0])]),
            r#"the buffers of param `w` differ in length (["m", "v"]: [1, 2])"#
        );
        assert!(Slots::<2>::import(&state(&[]), p).is_ok());
    }

    #[test]
    #[should_panic(expected = "param `w` has 3 values but the optimizer holds state of 2 values")]
    fn reusing_a_name_with_a_new_length_panics() {
        let mut s = Slots::<1>::new();
        s.get_or_zero("Lion", "w", 2);
        s.get_or_zero("Lion", "w", 3);
    }

    impl OptimizerState {
        fn with_step(mut self, step: u64) -> Self {
            self.step = step;
            self
        }
    }
}
