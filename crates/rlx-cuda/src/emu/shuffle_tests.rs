//! The emulator's warp shuffles on hand-written kernels: the devices' exchange semantics
//! (CUDA's full warp, HIP's `width` segments, float and 64-bit values), shuffles beside
//! a warp waiting at `__syncthreads`, and the misuses it reports instead of hiding.

use super::EmuGpu;
use crate::device::Gpu;

/// `k0`: threads below `p.m[0]` swap their index with lane `t ^ 1` (CUDA), then the
/// block meets at a barrier (the other warp waits there meanwhile). `k1`: HIP shuffles of
/// width 16 of a float with mask 9 and of a double with mask 16 (a partner beyond the
/// segment: each thread keeps its own value).
const SOURCE: &str = r#"
struct P0 { char* b[1]; long long m[1]; };
__global__ void k0(const P0 p) {
  int t = threadIdx.x;
  long long v = t;
  if (t < (int)p.m[0]) v = __shfl_xor_sync(0xffffffffu, v, 1, 32);
  __syncthreads();
  ((long long*)p.b[0])[t] = v;
}
struct P1 { char* b[2]; long long m[1]; };
__global__ void k1(const P1 p) {
  int t = threadIdx.x;
  float f = __shfl_xor(t * 0.5f, 9, 16);
  double d = __shfl_xor((double)t + 0.25, 16, 16);
  ((float*)p.b[0])[t] = f;
  ((double*)p.b[1])[t] = d;
}
"#;

fn params(ptrs: &[u64], m: i64) -> Vec<u8> {
    let mut b: Vec<u8> = ptrs.iter().flat_map(|p| p.to_le_bytes()).collect();
    b.extend_from_slice(&m.to_le_bytes());
    b
}

fn read<const N: usize>(gpu: &EmuGpu, p: u64, n: usize) -> Vec<[u8; N]> {
    let mut bytes = vec![0u8; n * N];
    gpu.download(&mut bytes, p).unwrap();
    bytes.chunks(N).map(|c| c.try_into().unwrap()).collect()
}

#[test]
fn emulated_shuffles_exchange_within_warps_and_segments_and_report_misuse() {
    let gpu = match EmuGpu::new() {
        Ok(g) => g,
        Err(e) => {
            println!("skipping: {e}");
            return;
        }
    };
    let m = gpu
        .load(SOURCE, &["k0".to_string(), "k1".to_string()])
        .unwrap();
    let out = gpu.alloc(64 * 8).unwrap();
    // Warp 0 shuffles while warp 1 waits at the barrier.
    m.launch(0, (2, 1, 1), (64, 1, 1), &params(&[out], 32), true)
        .unwrap();
    let got: Vec<i64> = read::<8>(&gpu, out, 64)
        .into_iter()
        .map(i64::from_le_bytes)
        .collect();
    let want: Vec<i64> = (0..64).map(|t| if t < 32 { t ^ 1 } else { t }).collect();
    assert_eq!(got, want);
    // Both warps shuffle.
    m.launch(0, (1, 1, 1), (64, 1, 1), &params(&[out], 64), true)
        .unwrap();
    let got: Vec<i64> = read::<8>(&gpu, out, 64)
        .into_iter()
        .map(i64::from_le_bytes)
        .collect();
    assert_eq!(got, (0..64).map(|t| t ^ 1).collect::<Vec<i64>>());
    // Part of a warp: it would hang on a device.
    let e = m
        .launch(0, (1, 1, 1), (64, 1, 1), &params(&[out], 20), true)
        .unwrap_err();
    assert!(e.contains("warp shuffle of k0 cannot complete"), "{e}");
    // A block ending inside a warp.
    let e = m
        .launch(0, (1, 1, 1), (48, 1, 1), &params(&[out], 48), true)
        .unwrap_err();
    assert!(e.contains("cannot complete"), "{e}");
    // HIP: 16-thread segments.
    let (f, d) = (gpu.alloc(32 * 4).unwrap(), gpu.alloc(32 * 8).unwrap());
    // Without fibers there is nobody to exchange with.
    let e = m
        .launch(1, (1, 1, 1), (32, 1, 1), &params(&[f, d], 0), false)
        .unwrap_err();
    assert!(e.contains("without cooperating threads"), "{e}");
    m.launch(1, (1, 1, 1), (32, 1, 1), &params(&[f, d], 0), true)
        .unwrap();
    let fs: Vec<f32> = read::<4>(&gpu, f, 32)
        .into_iter()
        .map(f32::from_le_bytes)
        .collect();
    let ds: Vec<f64> = read::<8>(&gpu, d, 32)
        .into_iter()
        .map(f64::from_le_bytes)
        .collect();
    for t in 0..32usize {
        let (lane, base) = (t % 16, t - t % 16);
        assert_eq!(fs[t], (base + (lane ^ 9)) as f32 * 0.5, "float lane {t}");
        assert_eq!(ds[t], t as f64 + 0.25, "double lane {t}");
    }
    for p in [out, f, d] {
        gpu.free(p);
    }
}
