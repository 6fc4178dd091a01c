use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [2, 4];
        repeat i in 0.. { let x = relu(x); }
    };
}
