//! Keys computed in place (`prepare_keys`) through `cache_get_or_compile_keys`: a
//! first read compiles (building the graph), the same data hits without building,
//! new small data misses by key but reuses the program, and the explanation of that
//! miss is the same as for prepared graphs.

use rlx_ir::{Activation, Graph, NodeId, Op, TensorData};
use rlx_runtime::*;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

mod common;
use common::NullBackend;

/// `relu(constant)` with a 3-element constant (lifted, keyed by value).
fn graph(vals: &[f32]) -> (Graph, NodeId) {
    let mut g = Graph::new("eager");
    let d = TensorData::from_f32(&[vals.len()], vals);
    let shape = d.shape();
    let c = g.add_node(Op::Constant { data: d.bytes }, vec![], shape);
    let r = g.add_op(Op::Activation(Activation::Relu), vec![c]).unwrap();
    (g, r)
}

/// Look the keys of `g` up, counting the builds.
fn read(g: &Graph, out: NodeId, builds: &Cell<u32>) -> PreparedKeys {
    let keys = prepare_keys(g, &[out], &|_| false, Device::Cpu);
    cache_get_or_compile_keys(keys.key, keys.structure_key, &g.name, Device::Cpu, || {
        builds.set(builds.get() + 1);
        let p = prepare(g, &[out], &|_| false, Device::Cpu);
        assert_eq!((p.key, p.structure_key), (keys.key, keys.structure_key));
        Ok((CompiledGraph::new(Device::Cpu, &p.graph)?, p.graph))
    })
    .unwrap();
    keys
}

#[test]
fn keys_computed_in_place_compile_once_hit_and_reuse_the_program() {
    register_backend(Arc::new(NullBackend));
    clear_cache();
    let builds = Cell::new(0);
    let (g1, r1) = graph(&[1.0, -2.0, 3.0]);
    let (g2, r2) = graph(&[4.0, -5.0, 6.0]);
    let k1 = prepare_keys(&g1, &[r1], &|_| false, Device::Cpu);
    let k2 = prepare_keys(&g2, &[r2], &|_| false, Device::Cpu);
    assert_ne!(k1.key, k2.key, "small constants are keyed by value");
    assert_eq!(k1.structure_key, k2.structure_key);
    assert_eq!(k1.lifted, vec![Lifted::Constant(NodeId(0))]);
    assert!(!cache_has_program(k1.key, k1.structure_key));

    read(&g1, r1, &builds);
    assert_eq!(
        (builds.get(), cache_compile_count(), cache_stats()),
        (1, 1, (0, 1))
    );
    assert!(cache_has_program(k1.key, k1.structure_key));
    assert_eq!(
        cache_last_miss().as_deref(),
        Some("graph `eager` had not been compiled on this thread before")
    );

    read(&g1, r1, &builds);
    assert_eq!(
        (builds.get(), cache_stats()),
        (1, (1, 1)),
        "same data: a hit"
    );

    assert!(
        cache_has_program(k2.key, k2.structure_key),
        "the structure is cached"
    );
    read(&g2, r2, &builds);
    assert_eq!(
        (builds.get(), cache_compile_count(), cache_stats()),
        (1, 1, (1, 2)),
        "new small data: a miss that reuses the program"
    );
    let why = cache_last_miss().unwrap();
    assert!(
        why.contains(
            "graph `eager` differs from a cached graph only in the values of small constants"
        ),
        "{why}"
    );
    assert!(cache_contains(k2.key));
}

#[test]
fn keys_into_a_reused_list_clear_its_stale_contents_and_equal_prepare_keys() {
    // The per-thread list eager reads reuse: whatever a previous graph left in it (here
    // more entries than this graph lifts) must be gone, and the keys must be those of
    // `prepare_keys`.
    let (g, r) = graph(&[1.0, -2.0, 3.0]);
    let want = prepare_keys(&g, &[r], &|_| false, Device::Cpu);
    let mut lifted = vec![Lifted::Constant(NodeId(7)); 5];
    let keys = prepare_keys_into(&g, &[r], &|_| false, Device::Cpu, &mut lifted);
    assert_eq!(keys, (want.key, want.structure_key));
    assert_eq!(lifted, want.lifted);
}

/// `cache_get_keys` (the one-look path of eager reads) counts exactly what
/// `cache_get_or_compile_keys` counts when a program is cached, returns that program,
/// and counts nothing when a compile is needed — so a caller that falls back to
/// `cache_get_or_compile_keys` still counts one miss per read.
#[test]
fn the_one_look_lookup_counts_like_the_compiling_one_and_nothing_when_it_finds_nothing() {
    register_backend(Arc::new(NullBackend));
    clear_cache();
    let builds = Cell::new(0);
    let (g1, r1) = graph(&[1.0, -2.0, 3.0]);
    let (g2, r2) = graph(&[4.0, -5.0, 6.0]);
    let k1 = prepare_keys(&g1, &[r1], &|_| false, Device::Cpu);
    let k2 = prepare_keys(&g2, &[r2], &|_| false, Device::Cpu);

    assert!(cache_get_keys(k1.key, k1.structure_key, &g1.name).is_none());
    assert_eq!((cache_stats(), cache_len()), ((0, 0), 0), "nothing counted");
    read(&g1, r1, &builds);
    assert_eq!((builds.get(), cache_stats()), (1, (0, 1)));

    let hit = cache_get_keys(k1.key, k1.structure_key, &g1.name).expect("cached");
    assert_eq!(cache_stats(), (1, 1), "same data: a hit");
    let reused = cache_get_keys(k2.key, k2.structure_key, &g2.name).expect("same structure");
    assert!(
        Rc::ptr_eq(&hit, &reused),
        "new small data reuses the program"
    );
    assert_eq!(
        (
            builds.get(),
            cache_compile_count(),
            cache_stats(),
            cache_len()
        ),
        (1, 1, (1, 2), 2),
        "a miss served without a compile, now cached under its own key"
    );
    assert!(cache_last_miss().unwrap().contains("small constants"));
    assert!(cache_get_keys(k2.key, k2.structure_key, &g2.name).is_some());
    assert_eq!(cache_stats(), (2, 2), "the reused key now hits");
}
