//! The expansion needs no imports (not even `std::ops::Neg`) and produces no warnings.
#![deny(warnings)]

fn main() {
    let n = 2usize;
    let eps = 1e-5f32;
    let g = rlx_tensor::rlx! {
        fn block(x, w, b) { let h = gelu(linear(x, w, b)); let h = -h ** 2; }
        input x: [2, 4];
        param w[2] @ "l.{i}.w": [4, 4];
        param b[2] @ "l.{i}.b": [4];
        param gamma: [4];
        const half = 0.5: F32;
        repeat i in 0..2 { let x = block(x, w[i], b[i]); }
        repeat n { let x = x.layer_norm(gamma, gamma, ~eps) * half; }
        scan h = x for 3 { let h = tanh(h) + gamma; }
        tap x;
        let y = where_(h > 0.0, h, -h).softmax(-1);
    };
    assert_eq!(g.outputs.len(), 2);
    let x = rlx_tensor::Tensor::ones([2]);
    let y = rlx_tensor::rlx_expr!(-x * 2.0);
    assert_eq!(y.dims(), vec![2]);
}
