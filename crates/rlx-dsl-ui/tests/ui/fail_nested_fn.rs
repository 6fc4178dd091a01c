use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        fn outer(x) {
            fn inner(y) { let z = relu(y); }
            let y = x;
        }
        input x: [4];
        let y = outer(x);
    };
}
