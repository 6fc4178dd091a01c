use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        const t = [[1, 2, 3], [4, 5], [6, 7, 8]]: F32;
        let y = relu(t);
    };
}
