use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [4];
        repeat 2 {
            let x = relu(x);
            out x;
        }
    };
}
