use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        fn blk(x, w) { let h = x @ w; }
        input a: [2, 2];
        param b: [2, 2];
        let y = blk(x: a, weight: b);
    };
}
