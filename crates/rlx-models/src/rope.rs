//! Rotary position embeddings: the frequencies of every `rope_type` that Llama-family
//! configs use, and the cos/sin tables fed to [`rlx_tensor::Tensor::rope`].
//!
//! The tables are computed on the host (once per step, a few KB) the way `transformers`
//! computes them — inverse frequencies rounded to f32, angles as f32 products — so the
//! model sees the same rotations.

use crate::{Error, Result};
use serde_json::Value;
use std::f64::consts::PI;

/// How the inverse frequencies are derived from the default ones.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeKind {
    /// `1 / theta^(2i/d)`.
    Default,
    /// Positions interpolated: frequencies divided by `factor`.
    Linear {
        /// The context extension factor.
        factor: f64,
    },
    /// Dynamic NTK: beyond `max_position_embeddings` the base grows with the length.
    Dynamic {
        /// The context extension factor.
        factor: f64,
    },
    /// Llama 3.1's band-wise scaling.
    Llama3 {
        /// The context extension factor.
        factor: f64,
        /// Wavelengths longer than `original / low_freq_factor` are scaled fully.
        low_freq_factor: f64,
        /// Wavelengths shorter than `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length of the original model.
        original_max_position_embeddings: f64,
    },
    /// YaRN: interpolation blended with extrapolation per band, plus an attention factor
    /// (folded into the tables).
    Yarn {
        /// The context extension factor.
        factor: f64,
        /// Fast rotation count bounding the extrapolated band.
        beta_fast: f64,
        /// Slow rotation count bounding the interpolated band.
        beta_slow: f64,
        /// The context length of the original model.
        original_max_position_embeddings: f64,
        /// Whether the band limits are rounded to whole dims.
        truncate: bool,
    },
}

/// A model's rotary embedding: base, rotated width and scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeScaling {
    /// The base (`rope_theta`).
    pub theta: f64,
    /// Rotated dims per head (even; `head_dim` unless `partial_rotary_factor` < 1).
    pub rot_dim: usize,
    /// The scaling rule.
    pub kind: RopeKind,
    /// Multiplies cos and sin (YaRN's attention factor; 1 otherwise).
    pub attention_factor: f64,
    /// `max_position_embeddings` (dynamic scaling starts past it).
    pub max_position_embeddings: usize,
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::new(format!("config.json: rope: {what}"))
}

impl RopeScaling {
    /// No rotary embedding (GPT-2 uses learned positions).
    pub fn none() -> RopeScaling {
        RopeScaling {
            theta: 10000.0,
            rot_dim: 0,
            kind: RopeKind::Default,
            attention_factor: 1.0,
            max_position_embeddings: 0,
        }
    }

    /// Read the rope settings of a config in any of the forms `transformers` writes:
    /// 4.x `rope_theta` + `rope_scaling` (`type` or `rope_type`), or 5.x
    /// `rope_parameters` (holding `rope_theta` and the scaling keys).
    pub fn from_config(config: &Value, head_dim: usize, max_pos: usize) -> Result<RopeScaling> {
        let get = |v: &Value, k: &str| v.get(k).filter(|x| !x.is_null()).cloned();
        let params = get(config, "rope_parameters").or_else(|| get(config, "rope_scaling"));
        let p = params.unwrap_or(Value::Null);
        let num = |k: &str| -> Result<Option<f64>> {
            match get(&p, k).or_else(|| get(config, k)) {
                None => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| bad(format!("`{k}` is {v}, expected a number"))),
            }
        };
        let theta = num("rope_theta")?.unwrap_or(10000.0);
        let partial = num("partial_rotary_factor")?.unwrap_or(1.0);
        let rot_dim = ((head_dim as f64 * partial) as usize) & !1;
        if rot_dim == 0 {
            return Err(bad(format!(
                "head_dim {head_dim} × partial_rotary_factor {partial} rotates no dims"
            )));
        }
        let kind_name = get(&p, "rope_type")
            .or_else(|| get(&p, "type"))
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_else(|| "default".into());
        let factor = || -> Result<f64> {
            num("factor")?
                .filter(|f| *f >= 1.0)
                .ok_or_else(|| bad(format!("rope_type {kind_name:?} needs a `factor` ≥ 1")))
        };
        let original = num("original_max_position_embeddings")?.unwrap_or(max_pos as f64);
        let mut attention_factor = 1.0;
        let kind = match kind_name.as_str() {
            "default" => RopeKind::Default,
            "linear" => RopeKind::Linear { factor: factor()? },
            "dynamic" => RopeKind::Dynamic { factor: factor()? },
            "llama3" => RopeKind::Llama3 {
                factor: factor()?,
                low_freq_factor: num("low_freq_factor")?.unwrap_or(1.0),
                high_freq_factor: num("high_freq_factor")?.unwrap_or(4.0),
                original_max_position_embeddings: original,
            },
            "yarn" => {
                let factor = factor()?;
                let mscale = |scale: f64, m: f64| {
                    if scale <= 1.0 {
                        1.0
                    } else {
                        0.1 * m * scale.ln() + 1.0
                    }
                };
                attention_factor = match (
                    num("attention_factor")?,
                    num("mscale")?,
                    num("mscale_all_dim")?,
                ) {
                    (Some(a), _, _) => a,
                    (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                        mscale(factor, m) / mscale(factor, all)
                    }
                    _ => mscale(factor, 1.0),
                };
                RopeKind::Yarn {
                    factor,
                    beta_fast: num("beta_fast")?.unwrap_or(32.0),
                    beta_slow: num("beta_slow")?.unwrap_or(1.0),
                    original_max_position_embeddings: original,
                    truncate: get(&p, "truncate")
                        .and_then(|v| v.as_bool())
                        .unwrap_or(true),
                }
            }
            other => {
                return Err(bad(format!(
                    "rope_type {other:?} is not supported (supported: default, linear, dynamic, llama3, yarn)"
                )));
            }
        };
        Ok(RopeScaling {
            theta,
            rot_dim,
            kind,
            attention_factor,
            max_position_embeddings: max_pos,
        })
    }

    /// The inverse frequencies (`rot_dim / 2` of them) for a sequence of `seq_len`
    /// positions (only dynamic scaling depends on it).
    pub fn inv_freq(&self, seq_len: usize) -> Vec<f32> {
        let d = self.rot_dim as f64;
        let base_freqs = |base: f64| -> Vec<f64> {
            (0..self.rot_dim / 2)
                .map(|i| 1.0 / base.powf((2 * i) as f64 / d))
                .collect()
        };
        let f: Vec<f64> = match &self.kind {
            RopeKind::Default => base_freqs(self.theta),
            RopeKind::Linear { factor } => {
                base_freqs(self.theta).iter().map(|x| x / factor).collect()
            }
            RopeKind::Dynamic { factor } => {
                let max = self.max_position_embeddings as f64;
                let s = seq_len as f64;
                if s > max {
                    let base =
                        self.theta * ((factor * s / max) - (factor - 1.0)).powf(d / (d - 2.0));
                    base_freqs(base)
                } else {
                    base_freqs(self.theta)
                }
            }
            RopeKind::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base_freqs(self.theta)
                    .into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * PI / f;
                        if wavelen > low_wavelen {
                            f / factor
                        } else if wavelen < high_wavelen {
                            f
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            RopeKind::Yarn {
                factor,
                beta_fast,
                beta_slow,
                original_max_position_embeddings: old,
                truncate,
            } => {
                let corr_dim =
                    |rot: f64| (d * (old / (rot * 2.0 * PI)).ln()) / (2.0 * self.theta.ln());
                let (mut low, mut high) = (corr_dim(*beta_fast), corr_dim(*beta_slow));
                if *truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    high += 0.001;
                }
                base_freqs(self.theta)
                    .into_iter()
                    .enumerate()
                    .map(|(i, extra)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let keep = 1.0 - ramp; // the extrapolation weight
                        (extra / factor) * (1.0 - keep) + extra * keep
                    })
                    .collect()
            }
        };
        f.into_iter().map(|x| x as f32).collect()
    }

    /// Row-major `[positions.len(), rot_dim / 2]` cos and sin tables for `positions`
    /// of a sequence `seq_len` long, scaled by the attention factor.
    pub fn tables(
        &self,
        positions: impl IntoIterator<Item = usize>,
        seq_len: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let inv = self.inv_freq(seq_len);
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for p in positions {
            for &f in &inv {
                // An f32 product, as transformers forms the angle.
                let angle = (p as f32 * f) as f64;
                cos.push((angle.cos() * self.attention_factor) as f32);
                sin.push((angle.sin() * self.attention_factor) as f32);
            }
        }
        (cos, sin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> RopeScaling {
        RopeScaling::from_config(&serde_json::from_str(json).unwrap(), 64, 2048).unwrap()
    }

    #[test]
    fn the_4x_and_5x_config_forms_read_the_same() {
        let a =
            parse(r#"{"rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 4.0}}"#);
        let b = parse(
            r#"{"rope_parameters": {"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0}}"#,
        );
        assert_eq!(a, b);
        assert_eq!(a.kind, RopeKind::Linear { factor: 4.0 });
        let d = parse(r#"{"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}"#);
        assert_eq!((d.theta, d.kind), (10000.0, RopeKind::Default));
    }

    #[test]
    fn default_frequencies_are_theta_to_minus_2i_over_d() {
        let r = parse("{}");
        let f = r.inv_freq(1);
        assert_eq!(f.len(), 32);
        assert_eq!(f[0], 1.0);
        assert!((f[16] as f64 - 10000f64.powf(-0.5)).abs() < 1e-9);
    }

    #[test]
    fn llama3_scaling_divides_long_wavelengths_and_keeps_short_ones() {
        let r = parse(
            r#"{"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#,
        );
        let plain = parse(r#"{"rope_theta": 500000.0}"#).inv_freq(1);
        let f = r.inv_freq(1);
        assert_eq!(f[0], plain[0]); // wavelength 2π < 8192/4: kept
        assert!((f[31] / plain[31] - 0.125).abs() < 1e-6); // longest: divided by 8
    }

    #[test]
    fn dynamic_scaling_changes_nothing_within_the_trained_length() {
        let r = parse(r#"{"rope_scaling": {"type": "dynamic", "factor": 2.0}}"#);
        assert_eq!(r.inv_freq(2048), parse("{}").inv_freq(1));
        assert!(r.inv_freq(4096)[10] < r.inv_freq(2048)[10]);
    }

    #[test]
    fn unknown_rope_types_are_errors_naming_the_supported_ones() {
        let e = RopeScaling::from_config(
            &serde_json::json!({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}),
            64,
            2048,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("\"longrope\" is not supported"),
            "{e}"
        );
    }
}
