//! Text in and out: a `tokenizer.json` through the `tokenizers` crate, and streaming
//! decoding of generated tokens.

use crate::{Error, Result};
use std::path::Path;

/// A Hugging Face tokenizer read from `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({} tokens)", self.vocab_size())
    }
}

impl Tokenizer {
    /// Read `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::new(format!("tokenizer: cannot load {}: {e}", path.display())))?;
        Ok(Tokenizer { inner })
    }

    /// Parse the text of a `tokenizer.json`.
    pub fn from_json(json: &str) -> Result<Tokenizer> {
        let inner = json
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| Error::new(format!("tokenizer: invalid tokenizer.json: {e}")))?;
        Ok(Tokenizer { inner })
    }

    /// Token ids of `text`; `special` adds the tokenizer's special tokens (e.g. BOS) as
    /// its post-processor says.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, special)
            .map_err(|e| Error::new(format!("tokenizer: cannot encode {text:?}: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`; `skip_special` leaves special tokens out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| Error::new(format!("tokenizer: cannot decode {ids:?}: {e}")))
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token string (e.g. `"</s>"`), if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// A streaming decoder for tokens generated after a prompt.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tok: self,
            ids: Vec::new(),
            emitted: 0,
        }
    }
}

/// Turns tokens into text as they arrive: each [`TextStream::push`] returns the text that
/// became final. A token that ends inside a multi-byte character (byte-level BPE) yields
/// nothing until the character completes.
pub struct TextStream<'a> {
    tok: &'a Tokenizer,
    ids: Vec<u32>,
    /// Bytes of the decoded text already returned.
    emitted: usize,
}

impl TextStream<'_> {
    /// Add a token; returns the new text (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tok.decode(&self.ids, true)?;
        // Hold back an incomplete character (decoded as U+FFFD) until it completes.
        if text.ends_with('\u{FFFD}')
            || text.len() < self.emitted
            || !text.is_char_boundary(self.emitted)
        {
            return Ok(String::new());
        }
        let new = text[self.emitted..].to_string();
        self.emitted = text.len();
        Ok(new)
    }
}
