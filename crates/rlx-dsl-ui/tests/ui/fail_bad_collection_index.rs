use rlx_tensor::{Tensor, rlx};

fn main() {
    let cb = vec![Tensor::ones([4])];
    let j = 0usize;
    let _g = rlx! {
        bind cb[];
        input x: [4];
        let y = x + cb[j];
    };
}
