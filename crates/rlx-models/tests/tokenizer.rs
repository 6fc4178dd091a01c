//! The `tokenizers` crate (built without onig, regexes through fancy-regex) against the
//! Python `tokenizers` that trained the fixtures' BPE tokenizers: GPT-2's byte-level
//! pre-tokenizer and Llama 3's look-ahead split pattern.
#![cfg(feature = "tokenizers")]

use rlx_models::Tokenizer;
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn json(path: PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn encode_and_decode_match_python_tokenizers_on_unicode_whitespace_and_digits() {
    let probes = json(fixtures().join("tokenizer_probes.json"));
    for (name, dir) in [("gpt2", "gpt2"), ("llama3", "llama_gqa")] {
        let tok = Tokenizer::from_file(fixtures().join(dir).join("tokenizer.json")).unwrap();
        for p in probes[name].as_array().unwrap() {
            let text = p["text"].as_str().unwrap();
            let ids = tok.encode(text, true).unwrap();
            assert_eq!(ids, u32s(&p["ids"]), "{name}: {text:?}");
            assert_eq!(
                tok.decode(&ids, true).unwrap(),
                p["decoded"].as_str().unwrap(),
                "{name}: {text:?}"
            );
        }
    }
}

#[test]
fn prompts_encode_to_the_reference_ids_and_greedy_tokens_decode_to_its_text() {
    for model in ["llama_gqa", "qwen2", "gpt2"] {
        let tok = Tokenizer::from_file(fixtures().join(model).join("tokenizer.json")).unwrap();
        let r = json(fixtures().join(model).join("reference.json"));
        for p in r["prompts"].as_array().unwrap() {
            let ids = tok.encode(p["text"].as_str().unwrap(), true).unwrap();
            assert_eq!(ids, u32s(&p["ids"]), "{model}");
            let greedy = u32s(&p["greedy"]);
            assert_eq!(
                tok.decode(&greedy, true).unwrap(),
                p["greedy_text"].as_str().unwrap(),
                "{model}"
            );
        }
    }
}

#[test]
fn the_text_stream_emits_whole_characters_that_add_up_to_the_decoded_text() {
    let tok = Tokenizer::from_file(fixtures().join("gpt2/tokenizer.json")).unwrap();
    let text = "naïve café 🎉 done";
    let ids = tok.encode(text, false).unwrap();
    let mut stream = tok.stream();
    let mut out = String::new();
    for &id in &ids {
        let piece = stream.push(id).unwrap();
        assert!(!piece.contains('\u{FFFD}'), "{piece:?}");
        out.push_str(&piece);
    }
    assert_eq!(out, text);
    // The emoji is several byte-level tokens: some pushes yield nothing.
    assert!(ids.len() > out.chars().count() / 2);
}
