//! The `try_` GEMM entry points on hostile operands: every kind of refusal comes back
//! as the [`GemmError`] naming it, C is left untouched, and the panicking twin panics
//! with exactly the error's message; on valid operands both give the same bits.

use rlx_cpu::gemm::int8::{I8Path, gemm_i8_with, try_gemm_i8, try_gemm_i8_with};
use rlx_cpu::gemm::lowp::{
    LowpPath, bf16, f16, gemm_half_rounded_with, gemm_half_with, try_gemm_half,
    try_gemm_half_rounded_with, try_gemm_half_with,
};
use rlx_cpu::gemm::{
    F32Path, GemmError, MatMut, MatRef, dgemm, sgemm, sgemm_with, try_dgemm, try_sgemm,
    try_sgemm_with,
};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The message `f` panics with (it must panic).
fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("the panicking twin returned");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .expect("a string panic payload")
}

/// A view of `data` with the given geometry.
fn view<T>(
    data: &[T],
    dims: (usize, usize),
    strides: (isize, isize),
    offset: usize,
) -> MatRef<'_, T> {
    MatRef {
        data,
        rows: dims.0,
        cols: dims.1,
        row_stride: strides.0,
        col_stride: strides.1,
        offset,
    }
}

/// A mutable view of `data` with the given geometry.
fn view_mut<T>(
    data: &mut [T],
    dims: (usize, usize),
    strides: (isize, isize),
    offset: usize,
) -> MatMut<'_, T> {
    MatMut {
        data,
        rows: dims.0,
        cols: dims.1,
        row_stride: strides.0,
        col_stride: strides.1,
        offset,
    }
}

/// The bad operand sets every entry point must refuse, by their geometry: (A, B, C) as
/// (dims, strides, offset, slice length), and the error expected.
#[allow(clippy::type_complexity)]
fn hostile(
    op: &'static str,
) -> Vec<(
    [((usize, usize), (isize, isize), usize, usize); 3],
    GemmError,
)> {
    let rm = |r: usize, c: usize| ((r, c), (c as isize, 1isize), 0usize, r * c);
    vec![
        // Inner dimensions differ.
        (
            [rm(2, 3), rm(2, 2), rm(2, 2)],
            GemmError::ShapesDoNotChain {
                op,
                a: (2, 3),
                b: (2, 2),
                c: (2, 2),
            },
        ),
        // C has the wrong number of rows.
        (
            [rm(2, 3), rm(3, 2), rm(3, 2)],
            GemmError::ShapesDoNotChain {
                op,
                a: (2, 3),
                b: (3, 2),
                c: (3, 2),
            },
        ),
        // B's offset pushes its last element past the slice.
        (
            [rm(2, 3), ((3, 2), (2, 1), 1, 6), rm(2, 2)],
            GemmError::OutOfBounds {
                op,
                view: "B",
                dims: (3, 2),
                strides: (2, 1),
                offset: 1,
                reach: (1, 6),
                len: 6,
            },
        ),
        // A negative stride reaching below index 0.
        (
            [((2, 3), (3, -1), 1, 6), rm(3, 2), rm(2, 2)],
            GemmError::OutOfBounds {
                op,
                view: "A",
                dims: (2, 3),
                strides: (3, -1),
                offset: 1,
                reach: (-1, 4),
                len: 6,
            },
        ),
        // C's slice is one element short.
        (
            [rm(2, 3), rm(3, 2), ((2, 2), (2, 1), 0, 3)],
            GemmError::OutOfBounds {
                op,
                view: "C",
                dims: (2, 2),
                strides: (2, 1),
                offset: 0,
                reach: (0, 3),
                len: 3,
            },
        ),
        // C's rows overlap (row stride 1 with two columns).
        (
            [rm(2, 3), rm(3, 2), ((2, 2), (1, 1), 0, 4)],
            GemmError::OverlappingOutput {
                op,
                dims: (2, 2),
                strides: (1, 1),
            },
        ),
        // A zero stride in C with more than one row.
        (
            [rm(2, 3), rm(3, 2), ((2, 2), (0, 1), 0, 4)],
            GemmError::OverlappingOutput {
                op,
                dims: (2, 2),
                strides: (0, 1),
            },
        ),
    ]
}

/// Runs `try_f` and `panicking_f` on every hostile set of `op` (operand values from
/// `one`), checking the error, that C is untouched, and the twin's panic message.
fn refuses_every_hostile_set<
    T: Copy + PartialEq + std::fmt::Debug,
    C: Copy + PartialEq + std::fmt::Debug,
>(
    op: &'static str,
    one: T,
    c_fill: C,
    try_f: impl Fn(MatRef<'_, T>, MatRef<'_, T>, MatMut<'_, C>) -> Result<(), GemmError>,
    panicking_f: impl Fn(MatRef<'_, T>, MatRef<'_, T>, MatMut<'_, C>),
) {
    for ([a, b, c], expected) in hostile(op) {
        let (xa, xb) = (vec![one; a.3], vec![one; b.3]);
        let mut xc = vec![c_fill; c.3];
        let err = try_f(
            view(&xa, a.0, a.1, a.2),
            view(&xb, b.0, b.1, b.2),
            view_mut(&mut xc, c.0, c.1, c.2),
        )
        .expect_err(op);
        assert_eq!(err, expected, "{op}");
        assert!(xc.iter().all(|&v| v == c_fill), "{op}: C written on {err}");
        let msg = panic_message(|| {
            panicking_f(
                view(&xa, a.0, a.1, a.2),
                view(&xb, b.0, b.1, b.2),
                view_mut(&mut xc, c.0, c.1, c.2),
            )
        });
        assert_eq!(msg, err.to_string(), "{op}");
    }
}

#[test]
fn f32_and_f64_entry_points_refuse_bad_views_with_the_named_error_and_write_nothing() {
    refuses_every_hostile_set(
        "sgemm",
        1f32,
        7f32,
        |a, b, c| try_sgemm(1.0, a, b, 0.0, c, 2),
        |a, b, c| sgemm(1.0, a, b, 0.0, c, 2),
    );
    refuses_every_hostile_set(
        "dgemm",
        1f64,
        7f64,
        |a, b, c| try_dgemm(1.0, a, b, 0.0, c, 2),
        |a, b, c| dgemm(1.0, a, b, 0.0, c, 2),
    );
    refuses_every_hostile_set(
        "sgemm_with",
        1f32,
        7f32,
        |a, b, c| try_sgemm_with(F32Path::Faer, 1.0, a, b, 0.0, c, 2),
        |a, b, c| sgemm_with(F32Path::Faer, 1.0, a, b, 0.0, c, 2),
    );
}

#[test]
fn half_and_int8_entry_points_refuse_bad_views_with_the_named_error_and_write_nothing() {
    refuses_every_hostile_set(
        "gemm_half",
        bf16::ONE,
        7f32,
        |a, b, c| try_gemm_half_with(LowpPath::CastF32, a, b, c, false, 2),
        |a, b, c| gemm_half_with(LowpPath::CastF32, a, b, c, false, 2),
    );
    refuses_every_hostile_set(
        "gemm_half",
        f16::ONE,
        7f32,
        |a, b, c| try_gemm_half(a, b, c, true, 2),
        |a, b, c| rlx_cpu::gemm::lowp::gemm_half(a, b, c, true, 2),
    );
    refuses_every_hostile_set(
        "gemm_half_rounded",
        bf16::ONE,
        bf16::from_f32(7.0),
        |a, b, c| try_gemm_half_rounded_with(LowpPath::CastF32, a, b, c, 2),
        |a, b, c| gemm_half_rounded_with(LowpPath::CastF32, a, b, c, 2),
    );
    refuses_every_hostile_set(
        "gemm_i8",
        1i8,
        7i32,
        |a, b, c| try_gemm_i8(a, b, c, false, 2),
        |a, b, c| rlx_cpu::gemm::int8::gemm_i8(a, b, c, false, 2),
    );
    refuses_every_hostile_set(
        "gemm_i8",
        1i8,
        7i32,
        |a, b, c| try_gemm_i8_with(I8Path::Portable, a, b, c, true, 2),
        |a, b, c| gemm_i8_with(I8Path::Portable, a, b, c, true, 2),
    );
}

#[test]
fn a_path_this_cpu_cannot_run_is_refused_before_the_views_are_read() {
    // AMX never multiplies f16 (on any CPU); the views are also bad, and the path is
    // reported first.
    let x = [f16::ONE; 6];
    let mut c = [7f32; 4];
    let err = try_gemm_half_with(
        LowpPath::Amx,
        MatRef::row_major(&x, 2, 3),
        MatRef::row_major(&x[..4], 2, 2),
        MatMut::row_major(&mut c, 2, 2),
        false,
        1,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            GemmError::PathUnavailable {
                op: "gemm_half",
                path: "amx",
                operands: "f16",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("use LowpPath::default_for"),
        "{err}"
    );
    assert_eq!(c, [7.0; 4]);
    let mut out = [f16::ZERO; 4];
    let err = try_gemm_half_rounded_with(
        LowpPath::Amx,
        MatRef::row_major(&x[..4], 2, 2),
        MatRef::row_major(&x[..4], 2, 2),
        MatMut::row_major(&mut out, 2, 2),
        1,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        GemmError::PathUnavailable {
            op: "gemm_half_rounded",
            ..
        }
    ));

    // The f32 and int8 paths that need features this CPU may lack: checked where absent.
    let (xa, mut xc) = ([1f32; 4], [0f32; 4]);
    match F32Path::Avx512.available() {
        false => {
            let err = try_sgemm_with(
                F32Path::Avx512,
                1.0,
                MatRef::row_major(&xa, 2, 2),
                MatRef::row_major(&xa, 2, 2),
                0.0,
                MatMut::row_major(&mut xc, 2, 2),
                1,
            )
            .unwrap_err();
            assert!(matches!(
                err,
                GemmError::PathUnavailable {
                    op: "sgemm_with",
                    path: "avx512",
                    ..
                }
            ));
        }
        true => eprintln!("skipped: this CPU runs the avx512 f32 path, so it cannot be refused"),
    }
    let xi = [1i8; 4];
    let missing: Vec<I8Path> = I8Path::ALL.into_iter().filter(|p| !p.available()).collect();
    if missing.is_empty() {
        eprintln!("skipped: this CPU runs every int8 path, so none can be refused");
    }
    for path in missing {
        let mut ci = [7i32; 4];
        let err = try_gemm_i8_with(
            path,
            MatRef::row_major(&xi, 2, 2),
            MatRef::row_major(&xi, 2, 2),
            MatMut::row_major(&mut ci, 2, 2),
            false,
            1,
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                GemmError::PathUnavailable {
                    op: "gemm_i8",
                    operands: "i8",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(ci, [7; 4]);
    }
}

#[test]
fn try_twins_on_valid_operands_give_the_panicking_twins_bits() {
    let (m, k, n) = (37, 53, 29);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 37.0)
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 104_729 % 193) as f32 - 96.0) / 41.0)
        .collect();
    let run = |f: &dyn Fn(MatMut<'_, f32>)| {
        let mut c = vec![0.5f32; m * n];
        f(MatMut::row_major(&mut c, m, n));
        c
    };
    let (am, bm) = (MatRef::row_major(&a, m, k), MatRef::row_major(&b, k, n));
    let want = run(&|c| sgemm(0.75, am, bm, 0.25, c, 2));
    let got = run(&|c| try_sgemm(0.75, am, bm, 0.25, c, 2).unwrap());
    assert_eq!(got, want);
    for path in [F32Path::Faer, F32Path::Avx512, F32Path::Auto] {
        if path.available() {
            let want = run(&|c| sgemm_with(path, 1.0, am, bm, 0.0, c, 1));
            let got = run(&|c| try_sgemm_with(path, 1.0, am, bm, 0.0, c, 1).unwrap());
            assert_eq!(got, want, "{}", path.name());
        }
    }
    let (ah, bh): (Vec<bf16>, Vec<bf16>) = (
        a.iter().map(|&x| bf16::from_f32(x)).collect(),
        b.iter().map(|&x| bf16::from_f32(x)).collect(),
    );
    let (ahm, bhm) = (MatRef::row_major(&ah, m, k), MatRef::row_major(&bh, k, n));
    let want = run(&|c| gemm_half_with(LowpPath::CastF32, ahm, bhm, c, true, 2));
    let got = run(&|c| try_gemm_half_with(LowpPath::CastF32, ahm, bhm, c, true, 2).unwrap());
    assert_eq!(got, want);
    let mut want = vec![bf16::ZERO; m * n];
    gemm_half_rounded_with(
        LowpPath::CastF32,
        ahm,
        bhm,
        MatMut::row_major(&mut want, m, n),
        1,
    );
    let mut got = vec![bf16::ZERO; m * n];
    try_gemm_half_rounded_with(
        LowpPath::CastF32,
        ahm,
        bhm,
        MatMut::row_major(&mut got, m, n),
        1,
    )
    .unwrap();
    assert_eq!(got, want);
    let (ai, bi): (Vec<i8>, Vec<i8>) = (
        a.iter().map(|&x| (x * 20.0) as i8).collect(),
        b.iter().map(|&x| (x * 20.0) as i8).collect(),
    );
    let (aim, bim) = (MatRef::row_major(&ai, m, k), MatRef::row_major(&bi, k, n));
    let mut want = vec![3i32; m * n];
    rlx_cpu::gemm::int8::gemm_i8(aim, bim, MatMut::row_major(&mut want, m, n), true, 2);
    let mut got = vec![3i32; m * n];
    try_gemm_i8(aim, bim, MatMut::row_major(&mut got, m, n), true, 2).unwrap();
    assert_eq!(got, want);
}
