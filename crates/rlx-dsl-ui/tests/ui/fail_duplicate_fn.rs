use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        fn f(x) { let y = relu(x); }
        fn f(x) { let y = exp(x); }
        input x: [4];
        let y = f(x);
    };
}
