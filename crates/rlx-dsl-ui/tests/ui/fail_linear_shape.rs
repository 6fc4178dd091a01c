use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [2, 4];
        param w: [3, 8];
        param b: [3];
        let y = gelu(linear(x, w, b));
    };
}
