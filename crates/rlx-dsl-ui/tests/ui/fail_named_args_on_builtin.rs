use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [4];
        let y = relu(input: x);
    };
}
