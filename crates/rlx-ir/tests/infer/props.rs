//! Property tests: broadcasting laws of `Shape::broadcast_with` and reshape round trips.

use crate::ok;
use proptest::prelude::*;
use rlx_ir::{DType, Dim, Op, Shape};

/// Small dims, with size 1 and two dynamic symbols over-represented so that
/// matches, stretches and mismatches all occur often.
fn dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        3 => Just(Dim::Static(1)),
        4 => (0usize..4).prop_map(Dim::Static),
        1 => Just(Dim::Dynamic(0)),
        1 => Just(Dim::Dynamic(1)),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    prop::collection::vec(dim(), 0..5).prop_map(|d| Shape::from_dims(&d, DType::F32))
}

/// A shape plus a second one that broadcasts with it by construction: drop some
/// leading axes and set some remaining axes to 1.
fn compatible_pair() -> impl Strategy<Value = (Shape, Shape)> {
    shape()
        .prop_flat_map(|a| {
            let r = a.rank();
            (Just(a), 0..=r, prop::collection::vec(any::<bool>(), r))
        })
        .prop_map(|(a, drop, ones)| {
            let dims: Vec<Dim> = a.dims()[drop..]
                .iter()
                .zip(&ones[drop..])
                .map(|(d, one)| if *one { Dim::Static(1) } else { *d })
                .collect();
            let b = Shape::from_dims(&dims, DType::I32);
            (a, b)
        })
}

fn static_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..5)
}

proptest! {
    #[test]
    fn broadcast_is_commutative_in_dims(a in shape(), b in shape()) {
        let ab = a.broadcast_with(&b);
        let ba = b.broadcast_with(&a);
        prop_assert_eq!(ab.is_ok(), ba.is_ok());
        if let (Ok(ab), Ok(ba)) = (ab, ba) {
            prop_assert_eq!(ab.dims(), ba.dims());
            // the dtype is the receiver's
            prop_assert_eq!(ab.dtype(), a.dtype());
            prop_assert_eq!(ab.rank(), a.rank().max(b.rank()));
        }
    }

    #[test]
    fn broadcast_result_absorbs_both_operands(a in shape(), b in shape()) {
        if let Ok(r) = a.broadcast_with(&b) {
            let (ra, rb) = (r.broadcast_with(&a).unwrap(), r.broadcast_with(&b).unwrap());
            prop_assert_eq!(ra.dims(), r.dims());
            prop_assert_eq!(rb.dims(), r.dims());
            // and each operand can be broadcast_to the result with Op::Expand
            // when everything is static
            if let Some(target) = r.static_dims() {
                let t: Vec<i64> = target.iter().map(|&n| n as i64).collect();
                let ea = ok(&Op::Expand { target_shape: t.clone() }, &[&a]);
                let eb = ok(&Op::Expand { target_shape: t }, &[&b]);
                prop_assert_eq!(ea.dims(), r.dims());
                prop_assert_eq!(eb.dims(), r.dims());
            }
        }
    }

    #[test]
    fn size_one_axes_and_missing_axes_stretch((a, b) in compatible_pair()) {
        let r = a.broadcast_with(&b).unwrap();
        prop_assert_eq!(r.dims(), a.dims());
        let r = b.broadcast_with(&a).unwrap();
        prop_assert_eq!(r.dims(), a.dims());
        prop_assert_eq!(r.dtype(), DType::I32);
    }

    #[test]
    fn mismatched_non_one_dims_fail_and_name_both_shapes(a in shape(), b in shape()) {
        let rank = a.rank().max(b.rank());
        let at = |s: &Shape, i: usize| {
            let off = rank - s.rank();
            if i < off { Dim::Static(1) } else { s.dim(i - off) }
        };
        let clash = (0..rank).any(|i| {
            let (x, y) = (at(&a, i), at(&b, i));
            x != y && x != Dim::Static(1) && y != Dim::Static(1)
        });
        match a.broadcast_with(&b) {
            Ok(_) => prop_assert!(!clash),
            Err(msg) => {
                prop_assert!(clash);
                prop_assert!(msg.contains(&a.to_string()) && msg.contains(&b.to_string()), "{}", msg);
            }
        }
    }

    #[test]
    fn reshape_to_flat_and_back_is_the_identity(dims in static_shape()) {
        let x = Shape::new(&dims, DType::F16);
        let n = x.num_elements().unwrap();
        let flat = ok(&Op::Reshape { new_shape: vec![n as i64] }, &[&x]);
        prop_assert_eq!(&flat, &Shape::new(&[n], DType::F16));
        let back: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        prop_assert_eq!(ok(&Op::Reshape { new_shape: back }, &[&flat]), x);
    }

    #[test]
    fn reshape_with_a_wildcard_recovers_any_nonzero_axis(
        dims in prop::collection::vec(1usize..5, 1..5),
        pick in any::<prop::sample::Index>(),
    ) {
        let x = Shape::new(&dims, DType::F32);
        let i = pick.index(dims.len());
        let mut target: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        target[i] = -1;
        let flat = ok(&Op::Reshape { new_shape: vec![-1] }, &[&x]);
        prop_assert_eq!(ok(&Op::Reshape { new_shape: target }, &[&flat]), x);
    }

    #[test]
    fn reshape_round_trips_one_dynamic_axis(
        dims in prop::collection::vec(1usize..4, 0..4),
        pos in any::<prop::sample::Index>(),
    ) {
        // insert the dynamic axis at `pos`
        let mut all: Vec<Dim> = dims.iter().map(|&d| Dim::Static(d)).collect();
        let p = pos.index(all.len() + 1);
        all.insert(p, Dim::Dynamic(7));
        let x = Shape::from_dims(&all, DType::F32);
        let static_prod: usize = dims.iter().product();
        let merged = ok(&Op::Reshape { new_shape: vec![-1, static_prod as i64] }, &[&x]);
        prop_assert_eq!(merged.dims(), &[Dim::Dynamic(7), Dim::Static(static_prod)][..]);
        let back: Vec<i64> = all.iter().map(|d| d.as_static().map_or(-1, |n| n as i64)).collect();
        prop_assert_eq!(ok(&Op::Reshape { new_shape: back }, &[&merged]), x);
    }
}
