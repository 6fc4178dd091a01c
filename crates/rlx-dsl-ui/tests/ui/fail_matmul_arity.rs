use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [2, 2];
        let y = mm(x);
    };
}
