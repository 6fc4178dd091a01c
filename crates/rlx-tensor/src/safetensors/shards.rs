//! Sharded checkpoints: `model.safetensors.index.json` and model directories.

use super::{SafeTensors, map_file};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The index file Hugging Face writes beside sharded weights.
const INDEX: &str = "model.safetensors.index.json";
/// The single-file checkpoint of a model directory.
const SINGLE: &str = "model.safetensors";
/// Index files are small (one line per tensor); a larger one is not an index.
const MAX_INDEX_BYTES: u64 = 64 << 20;

pub(super) fn open_sharded(path: &Path) -> Result<SafeTensors> {
    if path.is_dir() {
        let index = path.join(INDEX);
        if index.is_file() {
            return open_index(&index);
        }
        let single = path.join(SINGLE);
        if single.is_file() {
            return SafeTensors::open(&single);
        }
        let found: Vec<String> = std::fs::read_dir(path)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".safetensors") || n.ends_with(".json"))
                    .collect()
            })
            .unwrap_or_default();
        return Err(Error::checkpoint(format!(
            "safetensors: {} holds neither {INDEX} nor {SINGLE} (safetensors/json files there: \
             {found:?}); pass the file to open, or the index to open_sharded",
            path.display()
        )));
    }
    if path.to_string_lossy().ends_with(".json") {
        return open_index(path);
    }
    SafeTensors::open(path)
}

/// `Err` unless `file` is a plain relative path that stays inside the index's directory
/// (an index naming `/etc/passwd` or `../x` is not a checkpoint's).
fn shard_path(index: &Path, dir: &Path, file: &str) -> Result<PathBuf> {
    let p = Path::new(file);
    let inside = !file.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    if !inside {
        return Err(Error::checkpoint(format!(
            "safetensors: {} names shard {file:?}, which is not a file name inside the index's \
             directory; a weight_map value must be a relative path without `..`",
            index.display()
        )));
    }
    Ok(dir.join(p))
}

fn open_index(index: &Path) -> Result<SafeTensors> {
    let bad = |why: String| {
        Error::checkpoint(format!(
            "safetensors: {} is not a valid safetensors index: {why}",
            index.display()
        ))
    };
    let len = std::fs::metadata(index)
        .map_err(|e| {
            Error::io(
                format!("safetensors: cannot open {}: {e}", index.display()),
                e,
            )
        })?
        .len();
    if len > MAX_INDEX_BYTES {
        return Err(bad(format!(
            "it is {len} bytes long (an index is at most {MAX_INDEX_BYTES} bytes)"
        )));
    }
    let text = std::fs::read_to_string(index).map_err(|e| {
        Error::io(
            format!("safetensors: cannot read {}: {e}", index.display()),
            e,
        )
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(bad(
            "it has no \"weight_map\" object mapping tensor names to shard files".into(),
        ));
    };
    let dir = index.parent().unwrap_or(Path::new("."));
    // Shard files in first-seen order (sorted names make that deterministic).
    let mut files: Vec<String> = Vec::new();
    let mut wanted: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, file) in map {
        let Some(file) = file.as_str() else {
            return Err(bad(format!(
                "weight_map[{name:?}] is {file}, not a file name"
            )));
        };
        let i = match files.iter().position(|f| f == file) {
            Some(i) => i,
            None => {
                files.push(file.to_string());
                files.len() - 1
            }
        };
        wanted.insert(name, i);
    }
    let mut parsed = Vec::with_capacity(files.len());
    for f in &files {
        parsed.push(map_file(&shard_path(index, dir, f)?)?);
    }
    let st = SafeTensors::from_shards(parsed)?;
    // The index must describe the shards: every listed tensor in the shard it names.
    let mut wrong = Vec::new();
    for (name, &i) in &wanted {
        match st.entries.get(*name) {
            None => wrong.push(format!("`{name}` is in no shard (index says {})", files[i])),
            Some(e) if e.shard != i => wrong.push(format!(
                "`{name}` is in {} but the index says {}",
                files[e.shard], files[i]
            )),
            Some(_) => {}
        }
    }
    if !wrong.is_empty() {
        let more = wrong.len().saturating_sub(10);
        wrong.truncate(10);
        return Err(bad(format!(
            "its weight_map does not match the shards: {}{}",
            wrong.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        )));
    }
    Ok(st)
}
