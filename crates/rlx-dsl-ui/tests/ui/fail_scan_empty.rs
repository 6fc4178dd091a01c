use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [2, 4];
        scan h = x for 4 { }
    };
}
