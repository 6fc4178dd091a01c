//! Heap allocations per eager call: `from_vec → (&a + &b).relu() → to_vec` with new data
//! each call (W8 eager). Its own test binary: it installs a counting global allocator.
//!
//! The count includes the caller's own two `vec![…]` operands and the returned
//! `Vec<f32>`: those three are the floor, and the library adds nothing to them. Anything
//! above them is per-call overhead of the library (graph nodes, constant payloads, the
//! run's output storage and its dims, the stored value); a change that adds an
//! allocation back to the eager path fails here.
#![cfg(feature = "eval")]

use rlx_tensor::Tensor;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the allocations (fresh and growing) made by threads that switched counting on.
struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: the allocator also runs while thread-locals are being torn down.
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: every method forwards to `System` unchanged; the counters are thread-locals
// with const initializers (no allocation, no destructor), so counting cannot recurse.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: the caller's contract is passed on to `System` as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: as for `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ON.with(|on| on.set(true));
    f();
    ON.with(|on| on.set(false));
    COUNT.with(|c| c.get())
}

/// One eager call whose data depend on `v`; returns the result.
fn eager(v: f32) -> Vec<f32> {
    let a = Tensor::from_vec(vec![1.0 + v, -2.0, 3.0], [3]);
    let b = Tensor::from_vec(vec![0.5, 0.5, -4.0 - v], [3]);
    (&a + &b).relu().to_vec()
}

/// The most allocations one eager call may make: the caller's three (two operand
/// vectors and the result). The result's dims are written into the vector the previous
/// read handed back to the CPU backend (`run_host_into` reuses a kept result's dims).
const MAX_PER_CALL: f64 = 3.0;

/// Allocations per call over `calls` eager calls with data `value(0..calls)`, checking
/// every result.
fn per_call(calls: u64, value: impl Fn(u64) -> f32) -> f64 {
    let mut wrong = 0;
    let mut want = Vec::with_capacity(3);
    let n = allocations(|| {
        for i in 0..calls {
            let v = value(i);
            want.clear();
            want.extend_from_slice(&[1.5 + v, 0.0, 0.0]);
            if eager(v) != want {
                wrong += 1;
            }
        }
    });
    assert_eq!(wrong, 0, "some eager call returned another call's values");
    n as f64 / calls as f64
}

#[test]
fn an_eager_call_with_new_data_allocates_no_more_than_its_operands_and_result_need() {
    // Data cycling through a few values (the W8 benchmark's pattern): after the first
    // round each read is a cache hit by key. The first call compiles; later ones fill
    // this thread's pools.
    let cycle = |i: u64| (i % 7) as f32;
    assert_eq!(eager(0.0), vec![1.5, 0.0, 0.0]);
    per_call(20, cycle);
    let cycling = per_call(200, cycle);
    // Values never seen before: each read misses by key and reuses the program compiled
    // for the structure, and the cache remembers the new key (the oldest one goes once
    // the cache is full, its entry's storage reused). Fill it first.
    let cap = rlx_runtime::cache_capacity() as u64;
    per_call(cap + 20, |i| 1000.0 + i as f32);
    let distinct = per_call(200, |i| 1000.0 + (cap + 20 + i) as f32);
    eprintln!(
        "eager (&a + &b).relu().to_vec(): {cycling:.2} allocations per call with cycling \
         data, {distinct:.2} with data never seen before"
    );
    for (what, n) in [("cycling", cycling), ("new", distinct)] {
        assert!(
            n <= MAX_PER_CALL,
            "an eager call with {what} data made {n:.2} heap allocations (at most \
             {MAX_PER_CALL}, the caller's two operands and the result included): something \
             on the eager path allocates again per call"
        );
    }
}
