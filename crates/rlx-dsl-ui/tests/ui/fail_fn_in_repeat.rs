use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        input x: [4];
        repeat 2 {
            fn f(a) { let b = relu(a); }
            let x = f(x);
        }
    };
}
