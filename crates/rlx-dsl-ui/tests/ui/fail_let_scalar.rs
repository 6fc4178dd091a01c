use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [4];
        let two = 1.0 + 1.0;
        let y = x * two;
    };
}
