//! Machine code shared by every binding of one program's dynamic dims.
//!
//! A program with dynamic dims is bound again for each new binding (a decode step with
//! a KV cache binds a new cache length every token), and each binding builds its own
//! kernel plans. The compiled code of a tile program does not depend on the sizes: the
//! element count is an argument of every call, and the tile loop is the same for any
//! space. What the code does depend on is exactly the key below (the instructions, the
//! exported values, which inputs are scalars, and whether exports are streamed), so the
//! plans of all bindings look their code up here and compile only what no earlier
//! binding compiled.
//!
//! One cache belongs to one compiled program (not to the process), so a program compiled
//! anew compiles its own code, as it did before the cache existed. The cache is bounded:
//! past its capacity the oldest entry is dropped (plans holding it keep their `Arc`).

use super::JitKernel;
use crate::exec::vm::{Instr, TileProg};
use std::sync::{Arc, Mutex};

/// What a tile program's machine code depends on.
struct Key {
    instrs: Vec<Instr>,
    exports: Vec<usize>,
    scalar_mask: u64,
    streaming: bool,
}

impl Key {
    fn matches(&self, prog: &TileProg, exports: &[usize], mask: u64, streaming: bool) -> bool {
        self.scalar_mask == mask
            && self.streaming == streaming
            && self.exports == exports
            && self.instrs == prog.instrs
    }
}

/// The compiled tile programs of one program, for all bindings of its dynamic dims.
pub(crate) struct JitCache {
    /// `(key, code)`, oldest first; `None`: the program does not compile (interpreted).
    entries: Mutex<Vec<(Key, Option<Arc<JitKernel>>)>>,
    capacity: usize,
}

impl JitCache {
    /// A cache for a program of `kernels` kernels. Each kernel compiles one program per
    /// scalar pattern of its inputs and streaming choice, usually one or two; the room
    /// is four per kernel (and at least 64), so a program's code stays cached while
    /// an unusual one cannot grow it without bound.
    pub(crate) fn for_kernels(kernels: usize) -> Arc<JitCache> {
        Arc::new(JitCache {
            entries: Mutex::new(Vec::new()),
            capacity: kernels.saturating_mul(4).max(64),
        })
    }

    /// The code of `prog` exporting `exports`, for inputs of scalar pattern `mask`
    /// (non-temporal export stores with `streaming`): the cached code when an earlier
    /// binding compiled the same, else compiled now (see [`super::compile`]); `None`
    /// when it does not compile.
    pub(crate) fn get_or_compile(
        &self,
        prog: &TileProg,
        exports: &[usize],
        mask: u64,
        streaming: bool,
    ) -> Option<Arc<JitKernel>> {
        // The lock is held while compiling (well under a millisecond): two plans of
        // one program that need the same code compile it once.
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = entries
            .iter()
            .find(|(key, _)| key.matches(prog, exports, mask, streaming))
        {
            return k.clone();
        }
        let kernel = super::compile(prog, exports, mask, streaming).map(Arc::new);
        // "Not compiled" because the JIT was just switched off says nothing about the
        // program: not remembered, so it compiles once the JIT is back on.
        if kernel.is_none() && !super::enabled() {
            return None;
        }
        if entries.len() >= self.capacity {
            entries.remove(0);
        }
        let key = Key {
            instrs: prog.instrs.clone(),
            exports: exports.to_vec(),
            scalar_mask: mask,
            streaming,
        };
        entries.push((key, kernel.clone()));
        kernel
    }
}
