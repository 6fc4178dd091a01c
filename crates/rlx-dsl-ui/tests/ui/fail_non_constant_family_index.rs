use rlx_tensor::rlx;

fn main() {
    let n = 2usize;
    let _g = rlx! {
        input x: [4, 4];
        param w[2]: [4, 4];
        repeat i in 0..n { let x = x @ w[i]; }
    };
}
