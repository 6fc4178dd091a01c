use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [2, 4];
        let y = relu(x);
        out y, z;
    };
}
