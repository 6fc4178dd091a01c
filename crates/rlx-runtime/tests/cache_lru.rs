//! The compile cache as a least-recently-used map: which entry is evicted, that a
//! re-used entry survives, the hit/miss/compile counts, the capacity setting, and the
//! `rlx::cache` tracing events of misses and evictions.

use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::*;
use std::sync::{Arc, Mutex, MutexGuard};

mod common;
use common::NullBackend;

/// The capacity is process-wide: tests that set it run one at a time, each on a
/// fresh cache (the cache itself is per thread).
fn setup(capacity: usize) -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    register_backend(Arc::new(NullBackend));
    set_cache_capacity(capacity);
    clear_cache();
    guard
}

fn graph(name: &str) -> Graph {
    let mut g = Graph::new(name);
    let x = g.input("x", Shape::new(&[2], DType::F32));
    g.set_outputs(vec![x]);
    g
}

/// Look `key` up, compiling graph `g{key}` on a miss.
fn get(key: u64) {
    let g = graph(&format!("g{key}"));
    cache_get_or_compile(key, || CompiledGraph::new(Device::Cpu, &g)).unwrap();
}

#[test]
fn the_least_recently_used_entry_is_the_one_evicted() {
    let _g = setup(3);
    for k in [1, 2, 3] {
        get(k);
    }
    get(1); // 1 is now the most recently used; 2 the least
    get(4);
    assert_eq!(cache_len(), 3);
    assert!(!cache_contains(2), "2 was the least recently used");
    assert!(cache_contains(1) && cache_contains(3) && cache_contains(4));
    assert_eq!(cache_stats(), (1, 4));
    assert_eq!(cache_compile_count(), 4);
    // 2 comes back: a miss that compiles again, evicting 3 (now the oldest).
    get(2);
    assert!(!cache_contains(3));
    assert!(cache_contains(1) && cache_contains(2) && cache_contains(4));
    assert_eq!(cache_stats(), (1, 5));
    assert_eq!(cache_compile_count(), 5);
}

#[test]
fn an_entry_in_use_survives_any_number_of_insertions() {
    let _g = setup(4);
    get(0);
    for k in 1..40 {
        get(k);
        get(0);
        assert!(cache_contains(0), "entry 0 evicted after inserting {k}");
        assert!(cache_len() <= 4);
    }
    assert_eq!(cache_len(), 4);
    // 39 hits on 0; 40 misses (0 once, then 1..40).
    assert_eq!(cache_stats(), (39, 40));
    assert_eq!(cache_compile_count(), 40);
    // The three most recent others are kept, the older ones are gone.
    assert!(cache_contains(39) && cache_contains(38) && cache_contains(37));
    assert!(!cache_contains(36) && !cache_contains(1));
}

#[test]
fn cache_contains_does_not_refresh_an_entry() {
    let _g = setup(2);
    get(1);
    get(2);
    assert!(cache_contains(1)); // a peek, not a use
    get(3);
    assert!(!cache_contains(1), "1 was still the least recently used");
    assert!(cache_contains(2) && cache_contains(3));
    assert_eq!(cache_stats(), (0, 3));
}

#[test]
fn lowering_the_capacity_trims_at_the_next_insertion() {
    let _g = setup(8);
    for k in 0..8 {
        get(k);
    }
    assert_eq!(cache_len(), 8);
    set_cache_capacity(3);
    assert_eq!(cache_capacity(), 3);
    get(8);
    assert_eq!(cache_len(), 3);
    assert!(cache_contains(6) && cache_contains(7) && cache_contains(8));
    set_cache_capacity(0);
    assert_eq!(cache_capacity(), 1, "0 is taken as 1");
    set_cache_capacity(CACHE_CAPACITY);
}

#[test]
fn a_structurally_equal_program_is_reused_and_the_miss_counted() {
    let _g = setup(4);
    let g = graph("same");
    let build = || CompiledGraph::new(Device::Cpu, &g);
    let a = cache_get_or_compile_prepared(10, 99, &g, Device::Cpu, build).unwrap();
    let b = cache_get_or_compile_prepared(11, 99, &g, Device::Cpu, build).unwrap();
    assert!(
        std::rc::Rc::ptr_eq(&a, &b),
        "same structure key: same program"
    );
    assert_eq!(cache_stats(), (0, 2));
    assert_eq!(cache_compile_count(), 1);
    assert!(cache_last_miss().unwrap().contains("reused"));
    cache_get_or_compile_prepared(11, 99, &g, Device::Cpu, build).unwrap();
    assert_eq!(cache_stats(), (1, 2));
}

/// Counts `rlx::cache` events by message.
#[derive(Default)]
struct Events(Mutex<Vec<String>>);

struct Collector(Arc<Events>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Collector {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target() == "rlx::cache"
            && *event.metadata().level() == tracing::Level::DEBUG
        {
            let mut m = String::new();
            event.record(&mut Message(&mut m));
            self.0.0.lock().unwrap().push(m);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn misses_and_evictions_emit_rlx_cache_debug_events() {
    let _g = setup(2);
    let events = Arc::new(Events::default());
    tracing::subscriber::with_default(Collector(events.clone()), || {
        get(1); // miss
        get(1); // hit: no event
        get(2); // miss
        get(3); // miss, evicts 1
    });
    let ev = events.0.lock().unwrap().clone();
    let misses = ev.iter().filter(|m| m.contains("miss")).count();
    let evictions = ev.iter().filter(|m| m.contains("evicted")).count();
    assert_eq!((misses, evictions), (3, 1), "events: {ev:?}");
}

/// With the map full, new keys of one structure (eager reads of new small data) evict
/// the least recently used key but never the structure's program: every lookup is
/// served by `cache_get_keys` without a compile, and the cache stays at capacity.
#[test]
fn a_full_cache_keeps_serving_new_keys_of_a_cached_structure() {
    let _g = setup(4);
    let g = graph("eager");
    let structure = 1_000;
    cache_get_or_compile_prepared(0, structure, &g, Device::Cpu, || {
        CompiledGraph::new(Device::Cpu, &g)
    })
    .unwrap();
    for key in 1..=20 {
        assert!(
            cache_get_keys(key, structure, "eager").is_some(),
            "key {key}"
        );
        assert!(cache_len() <= 4);
    }
    assert_eq!((cache_compile_count(), cache_len()), (1, 4));
    assert_eq!(cache_stats(), (0, 21));
    assert!(
        cache_contains(20) && !cache_contains(16),
        "the oldest keys went"
    );
    assert!(cache_get_keys(20, structure, "eager").is_some());
    assert_eq!(cache_stats(), (1, 21), "a recent key hits");
}
