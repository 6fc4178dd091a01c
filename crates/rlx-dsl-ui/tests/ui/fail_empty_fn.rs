use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        fn nothing(x) { }
        input x: [4];
        let y = nothing(x);
    };
}
