use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        const t = []: F32;
        let y = relu(t);
    };
}
