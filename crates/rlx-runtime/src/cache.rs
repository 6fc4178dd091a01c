//! The per-thread compile cache.

use crate::{CompiledGraph, Device, RuntimeResult};
use rlx_ir::{Graph, NodeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Entries kept before the whole cache is cleared.
pub const CACHE_CAPACITY: usize = 512;

/// A cached compiled graph, shared by every user on this thread.
pub type CachedGraph = Rc<RefCell<CompiledGraph>>;

#[derive(Default)]
struct CacheState {
    map: HashMap<u64, CachedGraph>,
    /// The same entries by structure key (see `Prepared::structure_key`).
    by_structure: HashMap<u64, CachedGraph>,
    hits: u64,
    misses: u64,
    /// Programs actually compiled (a miss may reuse a structurally equal program).
    compiles: u64,
    /// What each cached key was compiled from, for explaining later misses.
    seen: HashMap<u64, Fingerprint>,
    last_miss: Option<String>,
}

/// A compact description of a compiled graph: enough to say how another graph differs.
#[derive(Debug, Clone)]
struct Fingerprint {
    name: String,
    device: Device,
    nodes: Vec<String>,
    outputs: Vec<NodeId>,
}

impl Fingerprint {
    fn of(graph: &Graph, device: Device) -> Fingerprint {
        Fingerprint {
            name: graph.name.clone(),
            device,
            nodes: graph.nodes().iter().map(describe_node).collect(),
            outputs: graph.outputs.clone(),
        }
    }

    /// How many leading nodes agree (a similarity score for picking the closest entry).
    fn common_prefix(&self, other: &Fingerprint) -> usize {
        self.nodes
            .iter()
            .zip(&other.nodes)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Why `self` (the graph that missed) is not `was`.
    fn difference(&self, was: &Fingerprint) -> String {
        if self.device != was.device && self.nodes == was.nodes && self.outputs == was.outputs {
            return format!(
                "graph `{}` was compiled for {} but is now requested on {}",
                self.name, was.device, self.device
            );
        }
        if let Some(i) =
            (0..self.nodes.len().min(was.nodes.len())).find(|&i| self.nodes[i] != was.nodes[i])
        {
            return format!(
                "graph `{}` differs from the cached one at node %{i}: now `{}`, was `{}`",
                self.name, self.nodes[i], was.nodes[i]
            );
        }
        if self.nodes.len() != was.nodes.len() {
            return format!(
                "graph `{}` has {} nodes where the cached one has {} (the first {} agree)",
                self.name,
                self.nodes.len(),
                was.nodes.len(),
                self.nodes.len().min(was.nodes.len())
            );
        }
        if self.outputs != was.outputs {
            return format!(
                "graph `{}` requests outputs {:?} where the cached one returned {:?}",
                self.name, self.outputs, was.outputs
            );
        }
        format!(
            "graph `{}` matches a cached graph structurally but its key differs (hash collision guard)",
            self.name
        )
    }
}

/// One node as `%i = op(args) {attrs} : type`, with small constants shown by value.
fn describe_node(n: &rlx_ir::Node) -> String {
    let args: Vec<String> = n.inputs.iter().map(|i| i.to_string()).collect();
    let op = match &n.op {
        rlx_ir::Op::Constant { data } if data.len() <= 32 => format!("constant{data:?}"),
        rlx_ir::Op::Constant { data } => format!("constant({} bytes)", data.len()),
        rlx_ir::Op::Input { name } => format!("input `{name}`"),
        rlx_ir::Op::Param { name } => format!("param `{name}`"),
        other => format!("{other:?}"),
    };
    let op: String = op.chars().take(160).collect();
    format!("{op}({}) : {}", args.join(", "), n.shape)
}

thread_local! {
    static CACHE: RefCell<CacheState> = RefCell::new(CacheState::default());
}

/// Look `key` up; on a miss, build, insert and return the new entry.
/// Every call counts exactly one hit or one miss.
pub fn cache_get_or_compile(
    key: u64,
    build: impl FnOnce() -> RuntimeResult<CompiledGraph>,
) -> RuntimeResult<CachedGraph> {
    lookup(key, key, build).map(|(g, _)| g)
}

/// How a lookup was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    Hit,
    /// A miss by key served by a structurally equal program: nothing compiled.
    Reused,
    Compiled,
}

fn lookup(
    key: u64,
    structure_key: u64,
    build: impl FnOnce() -> RuntimeResult<CompiledGraph>,
) -> RuntimeResult<(CachedGraph, Served)> {
    let found = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(h) = c.map.get(&key).cloned() {
            c.hits += 1;
            return Some((h, Served::Hit));
        }
        c.misses += 1;
        let same = c.by_structure.get(&structure_key).cloned()?;
        insert(&mut c, key, structure_key, &same);
        Some((same, Served::Reused))
    });
    if let Some(f) = found {
        return Ok(f);
    }
    let compiled = Rc::new(RefCell::new(build()?));
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.compiles += 1;
        insert(&mut c, key, structure_key, &compiled);
    });
    Ok((compiled, Served::Compiled))
}

fn insert(c: &mut CacheState, key: u64, structure_key: u64, g: &CachedGraph) {
    if c.map.len() >= CACHE_CAPACITY {
        c.map.clear();
    }
    if c.by_structure.len() >= CACHE_CAPACITY {
        c.by_structure.clear();
    }
    c.map.insert(key, g.clone());
    c.by_structure.insert(structure_key, g.clone());
}

/// [`cache_get_or_compile`] that also remembers what `graph` looked like, so that a
/// later miss can be explained by [`cache_last_miss`].
pub fn cache_get_or_compile_graph(
    key: u64,
    graph: &Graph,
    device: Device,
    build: impl FnOnce() -> RuntimeResult<CompiledGraph>,
) -> RuntimeResult<CachedGraph> {
    cache_get_or_compile_prepared(key, key, graph, device, build)
}

/// [`cache_get_or_compile_graph`] for a prepared graph ([`crate::Prepared`]): a miss by
/// `key` whose `structure_key` is cached reuses that program — it counts as a miss
/// (API.md §6.2) but compiles nothing ([`cache_compile_count`] stays put).
pub fn cache_get_or_compile_prepared(
    key: u64,
    structure_key: u64,
    graph: &Graph,
    device: Device,
    build: impl FnOnce() -> RuntimeResult<CompiledGraph>,
) -> RuntimeResult<CachedGraph> {
    let (out, served) = lookup(key, structure_key, build)?;
    match served {
        Served::Hit => {}
        // Keep this path cheap: eager code lands here on every call with new data.
        Served::Reused => CACHE.with(|c| {
            c.borrow_mut().last_miss = Some(format!(
                "graph `{}` differs from a cached graph only in the values of small constants (keyed by value, API.md §6.2); its compiled program was reused (no recompile)",
                graph.name
            ));
        }),
        Served::Compiled => {
            let fp = Fingerprint::of(graph, device);
            CACHE.with(|c| {
                let mut c = c.borrow_mut();
                let reason = c
                    .seen
                    .values()
                    .filter(|f| f.name == fp.name)
                    .max_by_key(|f| (f.common_prefix(&fp), f.device == fp.device))
                    .map(|was| fp.difference(was))
                    .unwrap_or_else(|| {
                        format!(
                            "graph `{}` had not been compiled on this thread before",
                            fp.name
                        )
                    });
                c.last_miss = Some(reason);
                if c.seen.len() >= CACHE_CAPACITY {
                    c.seen.clear();
                }
                c.seen.insert(key, fp);
            });
        }
    }
    Ok(out)
}

/// How many programs this thread has compiled through the cache since the last
/// [`clear_cache`](crate::clear_cache). Cache misses that only differ from a cached
/// graph in the values of small constants reuse its program and do not count.
///
/// ```
/// use rlx_runtime::{cache_compile_count, clear_cache};
/// clear_cache();
/// assert_eq!(cache_compile_count(), 0);
/// ```
pub fn cache_compile_count() -> u64 {
    CACHE.with(|c| c.borrow().compiles)
}

/// Why the most recent cache miss on this thread missed (first compile, a different
/// device, or the first node where the graph differs from the closest cached graph of
/// the same name). `None` before any miss.
///
/// ```
/// use rlx_runtime::{cache_last_miss, clear_cache};
/// clear_cache();
/// assert_eq!(cache_last_miss(), None);
/// ```
pub fn cache_last_miss() -> Option<String> {
    CACHE.with(|c| c.borrow().last_miss.clone())
}

/// Whether `key` is cached on this thread (does not count as a lookup).
pub fn cache_contains(key: u64) -> bool {
    CACHE.with(|c| c.borrow().map.contains_key(&key))
}

/// `(hits, misses)` for the calling thread.
pub fn cache_stats() -> (u64, u64) {
    CACHE.with(|c| {
        let c = c.borrow();
        (c.hits, c.misses)
    })
}

/// Number of entries cached on the calling thread.
pub fn cache_len() -> usize {
    CACHE.with(|c| c.borrow().map.len())
}

/// Drop every cached entry on the calling thread and reset the counters.
pub fn clear_cache() {
    CACHE.with(|c| *c.borrow_mut() = CacheState::default());
}
