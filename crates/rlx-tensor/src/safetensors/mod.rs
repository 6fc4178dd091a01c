//! Reading and writing [safetensors] files: the checkpoint format of the Hugging Face
//! ecosystem (and of most others).
//!
//! [`SafeTensors`] opens one file memory-mapped, or a sharded set through its
//! `model.safetensors.index.json`, parses and validates every header up front, and reads
//! a tensor's bytes only when it is loaded by name — converted to the dtype asked for
//! (f32, f16 and bf16 between each other; fp8 `F8_E4M3` / `F8_E5M2` up to any float).
//! [`SafeTensors::params_for`] checks a whole file against the params a graph declares
//! and reports every missing, unexpected and mis-shaped tensor at once;
//! [`save_safetensors`] writes tensors in the same layout.
//!
//! ```
//! use rlx_ir::TensorData;
//! use rlx_tensor::{DType, SafeTensors, save_safetensors_data};
//! let path = std::env::temp_dir().join("rlx_doc_st_intro.safetensors");
//! let w = TensorData::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
//! save_safetensors_data(&path, &[("w", &w)]).unwrap();
//!
//! let st = SafeTensors::open(&path).unwrap();
//! assert_eq!(st.names(), ["w"]);
//! assert_eq!(st.shape("w"), Some(&[2, 2][..]));
//! let half = st.load_data("w", DType::BF16).unwrap(); // converted on load
//! assert_eq!(half.dtype, DType::BF16);
//! assert_eq!(half.to_f32_vec(), [1.0, 2.0, 3.0, 4.0]);
//! ```
//!
//! # Hostile files
//! Every header is validated before any tensor is read: its length must be at most
//! 100 MB and lie inside the file, it must be UTF-8 JSON naming known dtypes, and the
//! tensors' byte ranges must tile the data section exactly (no gaps, no overlaps,
//! nothing past the end), each range holding exactly `product(shape) × dtype size`
//! bytes (products that overflow are errors). No buffer is sized from a header before
//! that check, so a truncated or lying file is an [`Error`], never a
//! crash or a huge allocation.
//!
//! [safetensors]: https://huggingface.co/docs/safetensors

mod dtype;
mod params;
mod save;
mod shards;

pub use dtype::StoredDType;
pub use params::ParamMismatch;
#[cfg(feature = "eval")]
pub use save::save_safetensors;
pub use save::{save_safetensors_data, save_safetensors_data_with_metadata};

use crate::tensor::Tensor;
use crate::{Error, Result};
use ::safetensors::tensor::Metadata;
use rlx_ir::{DType, TensorData};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The bytes of one file: memory-mapped, or owned.
enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// One parsed file.
struct Shard {
    /// Where it came from (`None` for in-memory bytes).
    path: Option<PathBuf>,
    backing: Backing,
    /// Offset of the data section (8 + header length).
    data_start: usize,
}

/// Where one tensor lives.
#[derive(Debug, Clone)]
struct Entry {
    shard: usize,
    dtype: StoredDType,
    shape: Vec<usize>,
    /// Byte range inside the shard's data section (validated against the file).
    start: usize,
    end: usize,
}

/// A safetensors file (or a sharded set of them) opened for lazy, by-name loading.
///
/// Opening reads and validates the headers only; tensor bytes are read (from the
/// memory map) when a tensor is loaded. See the [module docs](self) for what is
/// validated.
///
/// Memory-mapped files must not be truncated or rewritten by another process while a
/// `SafeTensors` holds them open (the operating system may then fault on a read, as for
/// every memory-mapped reader); [`SafeTensors::read`] reads the file into memory instead.
pub struct SafeTensors {
    shards: Vec<Shard>,
    entries: BTreeMap<String, Entry>,
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafeTensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files: Vec<String> = self
            .shards
            .iter()
            .map(|s| match &s.path {
                Some(p) => p.display().to_string(),
                None => "<memory>".into(),
            })
            .collect();
        write!(
            f,
            "SafeTensors({} tensors in {files:?})",
            self.entries.len()
        )
    }
}

/// The error for a file that does not parse, naming it and what is wrong.
fn bad_file(path: Option<&Path>, e: impl std::fmt::Display) -> Error {
    let what = path.map_or("the bytes".to_string(), |p| p.display().to_string());
    Error::checkpoint(format!(
        "safetensors: {what} is not a valid safetensors file: {e}; it may be truncated or \
         corrupt — download or write it again"
    ))
}

impl SafeTensors {
    /// Open one `.safetensors` file, memory-mapped.
    ///
    /// Errors when the file cannot be read or is not a valid safetensors file (see the
    /// [module docs](self)). For a model directory or a sharded checkpoint, use
    /// [`SafeTensors::open_sharded`].
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        let path = path.as_ref();
        let shard = map_file(path)?;
        SafeTensors::from_shards(vec![shard])
    }

    /// Read one `.safetensors` file into memory (no memory map: safe against other
    /// processes truncating the file, at the cost of reading all of it now).
    pub fn read(path: impl AsRef<Path>) -> Result<SafeTensors> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            Error::io(
                format!("safetensors: cannot read {}: {e}", path.display()),
                e,
            )
        })?;
        let shard = parse_shard(Some(path.to_path_buf()), Backing::Owned(bytes))?;
        SafeTensors::from_shards(vec![shard])
    }

    /// Parse safetensors bytes held in memory.
    ///
    /// ```
    /// use rlx_tensor::SafeTensors;
    /// let err = SafeTensors::from_bytes(b"\xff\xff\xff\xff\xff\x00\x00\x00{}".to_vec()).unwrap_err();
    /// assert!(err.to_string().contains("not a valid safetensors file"));
    /// ```
    pub fn from_bytes(bytes: Vec<u8>) -> Result<SafeTensors> {
        let shard = parse_shard(None, Backing::Owned(bytes))?;
        SafeTensors::from_shards(vec![shard])
    }

    /// Open a checkpoint that may be sharded: `path` is a model directory, a
    /// `*.safetensors.index.json` file, or a single `.safetensors` file.
    ///
    /// In a directory, `model.safetensors.index.json` is used when present (every shard
    /// it names is opened, memory-mapped), else `model.safetensors`. The index's
    /// `weight_map` must name files inside the index's directory, and every tensor it
    /// lists must be in the shard it names; a tensor stored in two shards is an error.
    pub fn open_sharded(path: impl AsRef<Path>) -> Result<SafeTensors> {
        shards::open_sharded(path.as_ref())
    }

    fn from_shards(parsed: Vec<(Shard, Metadata)>) -> Result<SafeTensors> {
        let mut entries = BTreeMap::new();
        let mut metadata = BTreeMap::new();
        let (shards, metas): (Vec<Shard>, Vec<Metadata>) = parsed.into_iter().unzip();
        for (i, meta) in metas.iter().enumerate() {
            if let Some(m) = meta.metadata() {
                metadata.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            for (name, info) in meta.tensors() {
                let entry = Entry {
                    shard: i,
                    dtype: StoredDType::from_st(info.dtype),
                    shape: info.shape.clone(),
                    start: info.data_offsets.0,
                    end: info.data_offsets.1,
                };
                if let Some(prev) = entries.insert(name.clone(), entry) {
                    let file = |s: usize| {
                        shards[s]
                            .path
                            .as_ref()
                            .map_or("<memory>".into(), |p| p.display().to_string())
                    };
                    return Err(Error::checkpoint(format!(
                        "safetensors: tensor `{name}` is stored twice, in {} and in {}; a \
                         checkpoint must store every tensor once",
                        file(prev.shard),
                        file(i)
                    )));
                }
            }
        }
        Ok(SafeTensors {
            shards,
            entries,
            metadata,
        })
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.entries.keys().map(String::as_str).collect()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a tensor named `name` is stored.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The stored shape of `name`.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// The stored element type of `name`.
    pub fn dtype(&self, name: &str) -> Option<StoredDType> {
        self.entries.get(name).map(|e| e.dtype)
    }

    /// The `__metadata__` string pairs of the header (of every shard, merged).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The files this checkpoint was read from, in shard order (empty for bytes).
    pub fn files(&self) -> Vec<&Path> {
        self.shards
            .iter()
            .filter_map(|s| s.path.as_deref())
            .collect()
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.entries.get(name).ok_or_else(|| {
            let near: Vec<&str> = self
                .entries
                .keys()
                .filter(|k| similar(k, name))
                .take(5)
                .map(String::as_str)
                .collect();
            Error::unknown_name(format!(
                "safetensors: no tensor named `{name}` ({} tensors stored{}); list them with names()",
                self.entries.len(),
                if near.is_empty() {
                    String::new()
                } else {
                    format!(", similar names: {near:?}")
                }
            ))
        })
    }

    /// The stored little-endian bytes of `name` (a view into the map, no copy).
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        let e = self.entry(name)?;
        let shard = &self.shards[e.shard];
        // The header check tied every range to the file's length, so this is in bounds.
        Ok(&shard.backing.bytes()[shard.data_start + e.start..shard.data_start + e.end])
    }

    /// Load `name` converted to `dtype` as host data.
    ///
    /// Floats (fp8 included) convert to any float dtype, rounding to nearest even when
    /// narrowing; integers load as integer dtypes holding every value, or as floats;
    /// floats never load as integers. Errors name the tensor, both types and the fix.
    pub fn load_data(&self, name: &str, dtype: DType) -> Result<TensorData> {
        let e = self.entry(name)?;
        dtype::convert(name, e.dtype, &e.shape, self.bytes(name)?, dtype)
    }

    /// Load `name` converted to `dtype` as a constant [`Tensor`].
    ///
    /// ```
    /// use rlx_ir::TensorData;
    /// use rlx_tensor::{DType, SafeTensors, save_safetensors_data};
    /// let path = std::env::temp_dir().join("rlx_doc_st_load.safetensors");
    /// save_safetensors_data(&path, &[("b", &TensorData::from_f32(&[3], &[1.0, 2.0, 3.0]))]).unwrap();
    /// let t = SafeTensors::open(&path).unwrap().load("b", DType::F32).unwrap();
    /// assert_eq!(t.dims(), vec![3]);
    /// # #[cfg(feature = "eval")]
    /// assert_eq!((&t * 2.0).to_vec(), vec![2.0, 4.0, 6.0]);
    /// ```
    pub fn load(&self, name: &str, dtype: DType) -> Result<Tensor> {
        Ok(Tensor::from_data(self.load_data(name, dtype)?))
    }

    /// Load the float tensor `name` as f32 values (exact for F16, BF16 and fp8).
    pub fn load_f32(&self, name: &str) -> Result<Vec<f32>> {
        let e = self.entry(name)?;
        if e.dtype.is_float() {
            return dtype::floats_to_f32(
                &format!("safetensors load of `{name}`"),
                e.dtype,
                self.bytes(name)?,
            );
        }
        Ok(self.load_data(name, DType::F32)?.to_f32_vec())
    }
}

/// Whether `a` looks like a misspelling of `b` (shares a long suffix or prefix).
fn similar(a: &str, b: &str) -> bool {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let n = x.len().min(y.len()).min(12);
    let tail = |s: &str| s.rsplit('.').next().unwrap_or(s).to_string();
    (n >= 4 && (x.ends_with(&y[y.len() - n..]) || x.starts_with(&y[..n]))) || tail(a) == tail(b)
}

/// Map `path` and parse its header.
fn map_file(path: &Path) -> Result<(Shard, Metadata)> {
    let file = std::fs::File::open(path).map_err(|e| {
        Error::io(
            format!("safetensors: cannot open {}: {e}", path.display()),
            e,
        )
    })?;
    let len = file
        .metadata()
        .map_err(|e| {
            Error::io(
                format!("safetensors: cannot stat {}: {e}", path.display()),
                e,
            )
        })?
        .len();
    if len < 8 {
        return Err(bad_file(
            Some(path),
            format!("it is {len} bytes long, shorter than the 8-byte header length"),
        ));
    }
    // SAFETY: the map is read-only and private to this process. Its contents stay valid
    // as long as no other process truncates or rewrites the file while it is open, which
    // the type's docs require of the caller (the contract of every memory-mapped reader).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| {
        Error::io(
            format!("safetensors: cannot map {}: {e}", path.display()),
            e,
        )
    })?;
    parse_shard(Some(path.to_path_buf()), Backing::Mapped(map))
}

/// Validate the header of `backing` (see the module docs) and note where data starts.
fn parse_shard(path: Option<PathBuf>, backing: Backing) -> Result<(Shard, Metadata)> {
    let (n, meta) = ::safetensors::SafeTensors::read_metadata(backing.bytes())
        .map_err(|e| bad_file(path.as_deref(), e))?;
    let shard = Shard {
        path,
        backing,
        data_start: 8 + n,
    };
    Ok((shard, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_names_are_those_sharing_a_long_prefix_suffix_or_last_component() {
        assert!(similar(
            "model.layers.0.mlp.up_proj.weight",
            "model.layers.0.mlp.up.weight"
        ));
        assert!(similar("lm_head.weight", "lm_head.weights"));
        assert!(!similar("a.b", "c.d"));
    }
}
