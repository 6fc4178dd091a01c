//! Writing safetensors files.

use super::dtype::st_dtype_of;
use crate::{Error, Result};
use rlx_ir::TensorData;
use safetensors::tensor::TensorView;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Write named host tensors to `path` in the safetensors layout, with the metadata
/// `{"format": "pt"}` that PyTorch-side loaders (`transformers`) expect.
///
/// Each tensor keeps its dtype (every rlx dtype but `C128` has a safetensors type).
/// Names must be unique. The file is written beside `path` and renamed into place, so
/// a failed write never leaves a truncated checkpoint under `path`.
///
/// ```
/// use rlx_ir::TensorData;
/// use rlx_tensor::{DType, SafeTensors, save_safetensors_data};
/// let path = std::env::temp_dir().join("rlx_doc_st_save.safetensors");
/// let ids = TensorData::from_i64(&[3], &[7, 8, 9]);
/// save_safetensors_data(&path, &[("ids", &ids)]).unwrap();
/// let st = SafeTensors::open(&path).unwrap();
/// assert_eq!(st.load_data("ids", DType::I64).unwrap().to_i64_vec(), [7, 8, 9]);
/// assert_eq!(st.metadata().get("format").map(String::as_str), Some("pt"));
/// ```
pub fn save_safetensors_data(
    path: impl AsRef<Path>,
    tensors: &[(&str, &TensorData)],
) -> Result<()> {
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    save_safetensors_data_with_metadata(path, tensors, &meta)
}

/// [`save_safetensors_data`] with explicit `__metadata__` string pairs (nothing is
/// added to them).
pub fn save_safetensors_data_with_metadata(
    path: impl AsRef<Path>,
    tensors: &[(&str, &TensorData)],
    metadata: &HashMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let what = format!("save_safetensors to {}", path.display());
    let mut views = Vec::with_capacity(tensors.len());
    for (i, &(name, data)) in tensors.iter().enumerate() {
        if tensors[..i].iter().any(|(n, _)| *n == name) {
            return Err(Error::new(format!(
                "{what}: `{name}` is given twice; a file stores every name once"
            )));
        }
        let Some(dt) = st_dtype_of(data.dtype) else {
            return Err(Error::dtype(format!(
                "{what}: `{name}` is {}, which safetensors cannot store; cast it (e.g. to C64)",
                data.dtype
            )));
        };
        let view = TensorView::new(dt, data.dims.clone(), &data.bytes).map_err(|e| {
            Error::shape(format!(
                "{what}: `{name}` ({:?} {}, {} bytes) is inconsistent: {e}",
                data.dims,
                data.dtype,
                data.bytes.len()
            ))
        })?;
        views.push((name, view));
    }
    let tmp = temp_path(path);
    let meta = (!metadata.is_empty()).then(|| metadata.clone());
    let written = safetensors::serialize_to_file(views, meta, &tmp)
        .map_err(|e| match e {
            ::safetensors::SafeTensorError::IoError(io) => Error::io(format!("{what}: {io}"), io),
            other => Error::checkpoint(format!("{what}: {other}")),
        })
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| Error::io(format!("{what}: {e}"), e))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A sibling of `path` to write into before renaming (same directory, so the rename
/// does not cross file systems).
fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Compute named tensors and write them to `path` (see [`save_safetensors_data`]).
///
/// ```
/// use rlx_tensor::{DType, SafeTensors, Tensor, save_safetensors};
/// let path = std::env::temp_dir().join("rlx_doc_st_save_t.safetensors");
/// let w = Tensor::from_vec(vec![1.0, 2.0], [2]).cast(DType::BF16);
/// save_safetensors(&path, &[("w", &w)]).unwrap();
/// let st = SafeTensors::open(&path).unwrap();
/// assert_eq!(st.dtype("w").unwrap().name(), "BF16");
/// assert_eq!(st.load_f32("w").unwrap(), [1.0, 2.0]);
/// ```
#[cfg(feature = "eval")]
pub fn save_safetensors(path: impl AsRef<Path>, tensors: &[(&str, &crate::Tensor)]) -> Result<()> {
    let data: Vec<(&str, TensorData)> = tensors
        .iter()
        .map(|&(n, t)| t.try_to_data().map(|d| (n, d)))
        .collect::<Result<_>>()?;
    let refs: Vec<(&str, &TensorData)> = data.iter().map(|(n, d)| (*n, d)).collect();
    save_safetensors_data(path, &refs)
}
