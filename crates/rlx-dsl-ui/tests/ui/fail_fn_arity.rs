use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        fn block(x, w) { let h = relu(x @ w); }
        input x: [2, 4];
        param w: [4, 4];
        let y = block(x);
    };
}
