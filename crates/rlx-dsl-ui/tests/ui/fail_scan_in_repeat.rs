use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [2, 4];
        repeat 2 {
            scan h = x for 4 { let h = tanh(h); }
        }
    };
}
