use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        inptu x: [2, 4];
        let y = relu(x);
    };
}
