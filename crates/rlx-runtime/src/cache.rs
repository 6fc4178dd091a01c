//! The per-thread compile cache.

use crate::{CompiledGraph, RuntimeResult};
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
    hits: u64,
    misses: u64,
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
    let hit = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let found = c.map.get(&key).cloned();
        if found.is_some() {
            c.hits += 1;
        } else {
            c.misses += 1;
        }
        found
    });
    if let Some(h) = hit {
        return Ok(h);
    }
    let compiled = Rc::new(RefCell::new(build()?));
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.map.len() >= CACHE_CAPACITY {
            c.map.clear();
        }
        c.map.insert(key, compiled.clone());
    });
    Ok(compiled)
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
