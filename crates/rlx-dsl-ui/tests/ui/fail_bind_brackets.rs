use rlx_tensor::{Tensor, rlx};

fn main() {
    let cb = vec![Tensor::ones([4])];
    let _g = rlx! {
        bind cb[0];
        input x: [4];
        let y = x + cb[0];
    };
}
