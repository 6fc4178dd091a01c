use rlx_tensor::rlx;

fn main() {
    let _g = rlx! {
        fn ping(x) { let y = pong(x); }
        fn pong(x) { let y = ping(x); }
        input x: [4];
        let y = ping(x);
    };
}
