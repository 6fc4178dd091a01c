use rlx_tensor::rlx;

fn main() {
    let eps = 1e-5f32;
    let _g = rlx! {
        input x: [2, 4];
        param g: [4];
        param b: [4];
        let y = x.layer_norm(g, b, eps);
    };
}
