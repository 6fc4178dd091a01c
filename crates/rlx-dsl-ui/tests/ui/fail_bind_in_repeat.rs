use rlx_tensor::{Tensor, rlx};

fn main() {
    let a = Tensor::ones([4]);
    let _g = rlx! {
        input x: [2, 4];
        repeat 2 {
            bind a;
            let x = x + a;
        }
    };
}
