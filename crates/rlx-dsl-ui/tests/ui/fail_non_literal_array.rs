use rlx_tensor::rlx;

fn main() {
    let two = 2.0;
    let _g = rlx! {
        const t = [1.0, two, 3.0]: F32;
        let y = relu(t);
    };
}
