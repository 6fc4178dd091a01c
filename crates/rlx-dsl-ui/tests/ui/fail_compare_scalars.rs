use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [4];
        let y = x * (1.0 < 2.0);
    };
}
