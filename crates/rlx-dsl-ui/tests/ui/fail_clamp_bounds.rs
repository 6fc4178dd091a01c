use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [4];
        input lo: [4];
        let y = clamp(x, lo, 1.0);
    };
}
