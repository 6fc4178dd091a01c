//! The per-thread compile cache: a least-recently-used map from graph keys to compiled
//! programs, holding at most [`cache_capacity`] entries per thread.

use crate::{CompiledGraph, Device, RuntimeResult};
use lru::LruCache;
use rlx_ir::{Graph, NodeId};
use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::rc::Rc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The default number of compiled programs each thread's cache keeps (see
/// [`cache_capacity`] for how to change it).
pub const CACHE_CAPACITY: usize = 512;

/// A cached compiled graph, shared by every user on this thread.
pub type CachedGraph = Rc<RefCell<CompiledGraph>>;

/// The capacity set by [`set_cache_capacity`] (0: not set).
static CAPACITY_SET: AtomicUsize = AtomicUsize::new(0);

/// The capacity from `RLX_CACHE_CAPACITY` (read once), else [`CACHE_CAPACITY`].
fn env_capacity() -> usize {
    static ENV: OnceLock<usize> = OnceLock::new();
    *ENV.get_or_init(|| {
        let Ok(v) = std::env::var("RLX_CACHE_CAPACITY") else {
            return CACHE_CAPACITY;
        };
        match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                tracing::warn!(
                    target: "rlx::cache",
                    value = %v,
                    "RLX_CACHE_CAPACITY is not a positive integer; using the default {CACHE_CAPACITY}"
                );
                CACHE_CAPACITY
            }
        }
    })
}

/// How many compiled programs each thread's compile cache keeps before evicting the
/// least recently used one: the value given to [`set_cache_capacity`], else the
/// `RLX_CACHE_CAPACITY` environment variable (read once, at the first cache use; a
/// positive integer), else [`CACHE_CAPACITY`] (512).
///
/// ```
/// // Unless RLX_CACHE_CAPACITY or set_cache_capacity said otherwise:
/// if std::env::var_os("RLX_CACHE_CAPACITY").is_none() {
///     assert_eq!(rlx_runtime::cache_capacity(), rlx_runtime::CACHE_CAPACITY);
/// }
/// ```
pub fn cache_capacity() -> usize {
    match CAPACITY_SET.load(Ordering::Relaxed) {
        0 => env_capacity(),
        n => n,
    }
}

/// Set how many compiled programs each thread's compile cache keeps (process-wide,
/// overriding `RLX_CACHE_CAPACITY`; at least 1 — `0` is taken as 1). A thread whose
/// cache holds more evicts its least recently used entries at its next insertion.
/// Each cached program holds its compiled code and constants, so a lower capacity
/// trades memory for recompiles of graphs that come back after a while.
///
/// ```
/// use rlx_runtime::{cache_capacity, set_cache_capacity};
/// set_cache_capacity(64);
/// assert_eq!(cache_capacity(), 64);
/// ```
pub fn set_cache_capacity(n: usize) {
    CAPACITY_SET.store(n.max(1), Ordering::Relaxed);
}

/// One thread's cache. The three maps are bounded by [`cache_capacity`] and evict
/// their least recently used entries independently.
struct CacheState {
    /// Cached programs by key, with the structure key each was inserted under.
    map: LruCache<u64, (CachedGraph, u64)>,
    /// The same programs by structure key (see `Prepared::structure_key`).
    by_structure: LruCache<u64, CachedGraph>,
    hits: u64,
    misses: u64,
    /// Programs actually compiled (a miss may reuse a structurally equal program).
    compiles: u64,
    /// What each cached key was compiled from, for explaining later misses.
    seen: LruCache<u64, Fingerprint>,
    last_miss: Option<MissReason>,
}

/// Why the last miss missed; formatted only when asked ([`cache_last_miss`]), since
/// eager code with new small data misses (and reuses a program) on every call.
#[derive(Debug, Clone)]
enum MissReason {
    Text(String),
    /// The graph of this name differs from a cached one only in small constants.
    SmallConstants(String),
}

impl MissReason {
    fn text(&self) -> String {
        match self {
            MissReason::Text(t) => t.clone(),
            MissReason::SmallConstants(name) => small_constants_reason(name),
        }
    }
}

fn small_constants_reason(name: &str) -> String {
    format!(
        "graph `{name}` differs from a cached graph only in the values of small constants (keyed by value, API.md §6.2); its compiled program was reused (no recompile)"
    )
}

impl Default for CacheState {
    fn default() -> CacheState {
        // Bounded maps: an insertion into a full map reuses the evicted entry's storage
        // (eager code with new small data inserts a key on every read). `fit` resizes
        // them when the capacity changes, so a change applies at the next insertion.
        let cap = capacity_nonzero();
        CacheState {
            map: LruCache::new(cap),
            by_structure: LruCache::new(cap),
            hits: 0,
            misses: 0,
            compiles: 0,
            seen: LruCache::new(cap),
            last_miss: None,
        }
    }
}

/// [`cache_capacity`] as the maps' capacity type (it is at least 1).
fn capacity_nonzero() -> NonZeroUsize {
    NonZeroUsize::new(cache_capacity()).unwrap_or(NonZeroUsize::MIN)
}

impl CacheState {
    /// Resize the maps to the current capacity (evicting least recently used entries
    /// when it shrank).
    fn fit(&mut self) -> NonZeroUsize {
        let cap = capacity_nonzero();
        if self.map.cap() != cap {
            self.map.resize(cap);
            self.by_structure.resize(cap);
            self.seen.resize(cap);
        }
        cap
    }

    /// The program for `(key, structure_key)` when one is cached, counting the hit (by
    /// key) or the miss (served by a structurally equal program, now also cached under
    /// `key`). `None` — nothing counted — when a compile is needed.
    fn served(&mut self, key: u64, structure_key: u64) -> Option<(CachedGraph, Served)> {
        if let Some((h, sk)) = self.map.get(&key) {
            let (h, sk) = (h.clone(), *sk);
            // Using a program keeps its structure entry fresh too.
            self.by_structure.promote(&sk);
            self.hits += 1;
            return Some((h, Served::Hit));
        }
        let same = self.by_structure.get(&structure_key)?.clone();
        self.misses += 1;
        self.insert(key, structure_key, &same);
        Some((same, Served::Reused))
    }

    /// Trace a miss served by a structurally equal program and remember why it missed.
    fn note_reused(&mut self, key: u64, name: &str) {
        if tracing::enabled!(target: "rlx::cache", tracing::Level::DEBUG) {
            trace_miss(key, name, Served::Reused, &small_constants_reason(name));
        }
        if !matches!(&self.last_miss, Some(MissReason::SmallConstants(n)) if n == name) {
            self.last_miss = Some(MissReason::SmallConstants(name.to_string()));
        }
    }

    /// Insert `g` under `key` and `structure_key`; a full map evicts its least recently
    /// used entry.
    fn insert(&mut self, key: u64, structure_key: u64, g: &CachedGraph) {
        let cap = self.fit();
        if let Some((old, (evicted, _))) = self.map.push(key, (g.clone(), structure_key))
            && old != key
        {
            tracing::debug!(
                target: "rlx::cache",
                key = old,
                graph = %graph_name(&evicted),
                capacity = cap.get(),
                "compile cache full: evicted the least recently used program"
            );
        }
        if !self.by_structure.promote(&structure_key) {
            self.by_structure.push(structure_key, g.clone());
        }
    }
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
    let (g, served) = lookup(key, key, build)?;
    if served != Served::Hit {
        trace_miss(key, &graph_name(&g), served, "key not cached");
    }
    Ok(g)
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
    if let Some(found) = CACHE.with(|c| c.borrow_mut().served(key, structure_key)) {
        return Ok(found);
    }
    CACHE.with(|c| c.borrow_mut().misses += 1);
    let compiled = Rc::new(RefCell::new(build()?));
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.compiles += 1;
        c.insert(key, structure_key, &compiled);
    });
    Ok((compiled, Served::Compiled))
}

/// The graph name of a cached program (a placeholder while a caller holds it mutably).
fn graph_name(g: &CachedGraph) -> String {
    g.try_borrow()
        .map_or_else(|_| "(in use)".to_string(), |g| g.name().to_string())
}

/// Emit the `rlx::cache` debug event of a miss.
fn trace_miss(key: u64, graph: &str, served: Served, reason: &str) {
    tracing::debug!(
        target: "rlx::cache",
        key,
        graph,
        compiled = served == Served::Compiled,
        reason,
        "compile cache miss"
    );
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
    record(key, &graph.name, served, || Some(graph), device);
    Ok(out)
}

/// [`cache_get_or_compile_prepared`] for keys computed without building the graph
/// ([`crate::prepare_keys`]): `build` runs only when a program must be compiled and
/// returns it with the graph it was compiled from (kept to explain later misses). A hit
/// or a reuse touches no graph at all.
pub fn cache_get_or_compile_keys(
    key: u64,
    structure_key: u64,
    name: &str,
    device: Device,
    build: impl FnOnce() -> RuntimeResult<(CompiledGraph, Graph)>,
) -> RuntimeResult<CachedGraph> {
    let mut graph = None;
    let (out, served) = lookup(key, structure_key, || {
        let (compiled, g) = build()?;
        graph = Some(g);
        Ok(compiled)
    })?;
    record(key, name, served, || graph.as_ref(), device);
    Ok(out)
}

/// The cached program for keys computed without building the graph
/// ([`crate::prepare_keys`]) when one is cached, counted as
/// [`cache_get_or_compile_keys`] counts it: a hit by key, or a miss served by a
/// structurally equal program (nothing compiled; [`cache_last_miss`] says so). `None`,
/// with nothing counted, when a program must be compiled: call
/// [`cache_get_or_compile_keys`] then. One look at this thread's cache — the whole
/// cache work of an eager read whose program is cached.
///
/// ```
/// use rlx_runtime::{cache_get_keys, cache_stats, clear_cache};
/// clear_cache();
/// assert!(cache_get_keys(1, 2, "g").is_none());
/// assert_eq!(cache_stats(), (0, 0), "a lookup that finds nothing counts nothing");
/// ```
pub fn cache_get_keys(key: u64, structure_key: u64, name: &str) -> Option<CachedGraph> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let (g, served) = c.served(key, structure_key)?;
        if served == Served::Reused {
            c.note_reused(key, name);
        }
        Some(g)
    })
}

/// Trace a miss and remember why it missed (the graph is needed only for a compile).
fn record<'g>(
    key: u64,
    name: &str,
    served: Served,
    graph: impl FnOnce() -> Option<&'g Graph>,
    device: Device,
) {
    match served {
        Served::Hit => {}
        // Keep this path cheap: eager code lands here on every call with new data.
        Served::Reused => CACHE.with(|c| c.borrow_mut().note_reused(key, name)),
        Served::Compiled => {
            let Some(graph) = graph() else {
                return;
            };
            let fp = Fingerprint::of(graph, device);
            CACHE.with(|c| {
                let mut c = c.borrow_mut();
                let reason = c
                    .seen
                    .iter()
                    .map(|(_, f)| f)
                    .filter(|f| f.name == fp.name)
                    .max_by_key(|f| (f.common_prefix(&fp), f.device == fp.device))
                    .map(|was| fp.difference(was))
                    .unwrap_or_else(|| {
                        format!(
                            "graph `{}` had not been compiled on this thread before",
                            fp.name
                        )
                    });
                trace_miss(key, name, served, &reason);
                c.last_miss = Some(MissReason::Text(reason));
                c.fit();
                c.seen.put(key, fp);
            });
        }
    }
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
    CACHE.with(|c| c.borrow().last_miss.as_ref().map(MissReason::text))
}

/// Whether `key` is cached on this thread (does not count as a lookup, and does not
/// make the entry more recently used).
pub fn cache_contains(key: u64) -> bool {
    CACHE.with(|c| c.borrow().map.contains(&key))
}

/// Whether a lookup of `(key, structure_key)` would be served without compiling (the
/// key is cached, or a program of that structure is). Does not count as a lookup and
/// does not make entries more recently used.
pub fn cache_has_program(key: u64, structure_key: u64) -> bool {
    CACHE.with(|c| {
        let c = c.borrow();
        c.map.contains(&key) || c.by_structure.contains(&structure_key)
    })
}

/// `(hits, misses)` for the calling thread: every lookup counts exactly one of them.
/// A miss is a key not in the cache (never seen, or evicted as least recently used),
/// whether or not a structurally equal program could be reused for it.
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
