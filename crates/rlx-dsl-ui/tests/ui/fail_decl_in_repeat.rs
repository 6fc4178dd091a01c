use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [2, 4];
        repeat 2 {
            param w: [4, 4];
            let x = x @ w;
        }
    };
}
