#!/usr/bin/env python3
"""Development-time only: write the reference fixtures of rlx-models' tests.

Creates tiny random-weight checkpoints in Hugging Face layout with `transformers`, trains
two small BPE tokenizers with `tokenizers`, and records what transformers computes for
fixed prompts: the prompt's token ids, the last-position logits, and 20 greedy tokens.
The Rust tests compare against these files without Python.

    /tmp/peers/bin/pip install transformers tokenizers safetensors   # torch as well
    /tmp/peers/bin/python crates/rlx-models/scripts/make_fixtures.py

Everything is seeded; rerunning rewrites the same models (up to library versions).
"""

import copy
import json
import math
import shutil
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
VOCAB = 320
STEPS = 20

PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a small town by the sea,",
]
TOKENIZER_PROBES = [
    "Hello, world!",
    "héllo wörld — naïve café 🎉",
    "  leading spaces and\ttabs\nnew lines",
    "It's 2026; numbers 12345 and symbols #@!",
]

# Llama 3's pre-tokenizer pattern (needs look-around: a test that the Rust crate's
# fancy-regex build handles it).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus():
    """A few thousand lines of varied English-like text (deterministic)."""
    words = (
        "the of and to in a is that for it as was with be by on not he I this are or his "
        "from at which but have an they you were her she there one all we their has been "
        "quick brown fox jumps over lazy dog once upon time small town sea model tensor "
        "graph compile kernel memory cache token sample greedy rust python café naïve "
        "world hello numbers symbols spaces lines tabs"
    ).split()
    g = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(4000):
        n = int(torch.randint(3, 14, (1,), generator=g))
        idx = torch.randint(0, len(words), (n,), generator=g).tolist()
        line = " ".join(words[i] for i in idx)
        line = line[0].upper() + line[1:] + (". " if n % 3 else ", ") + str(n * 7)
        lines.append(line)
    return lines + PROMPTS + TOKENIZER_PROBES


def gpt2_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    return tok


def llama3_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(pattern=transformers_regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    return tok


def transformers_regex(pattern):
    from tokenizers import Regex

    return Regex(pattern)


def reinit(model, seed):
    """Weights with spread: random models at transformers' 0.02 init give near-uniform
    logits whose greedy choice flips on rounding; these give margins well above it."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p.shape[0] if "c_" in name and "gpt2" in type(model).__name__.lower() else p.shape[1]
                if "embed" in name or "wte" in name or "wpe" in name:
                    std = 1.0
                else:
                    std = 1.0 / math.sqrt(fan_in)
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:  # norm gains
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)


def greedy(model, ids):
    """20 greedy tokens with transformers' generate (KV cache on, EOS never stops it),
    and the smallest top-1/top-2 logit margin seen. The attention mask is explicit: left
    to infer it, generate would mask every token equal to the pad id (here the BOS)."""
    x = torch.tensor([ids])
    out = model.generate(
        x,
        attention_mask=torch.ones_like(x),
        do_sample=False,
        max_new_tokens=STEPS,
        min_new_tokens=STEPS,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
        eos_token_id=None,
    )
    toks = out.sequences[0, len(ids):].tolist()
    margins = []
    for step in out.logits:
        top = torch.topk(step[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    return toks, min(margins)


def last_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float().tolist()


def record(pristine, tok):
    """References for every prompt, each from a fresh copy of the model: transformers'
    dynamic rope keeps the longest length it has seen in the module, so a model that
    already generated would rotate later prompts differently."""
    out = []
    for text in PROMPTS:
        ids = tok.encode(text).ids
        toks, margin = greedy(copy.deepcopy(pristine), ids)
        out.append(
            {
                "text": text,
                "ids": ids,
                "last_logits": last_logits(copy.deepcopy(pristine), ids),
                "greedy": toks,
                "greedy_min_margin": margin,
                "greedy_text": tok.decode(toks, skip_special_tokens=True),
            }
        )
    return out


def write_model(name, model, tok, dtype, note, rewrite_config=None):
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    model.eval()
    model.generation_config.eos_token_id = None
    if dtype == torch.bfloat16:
        # The f32 references use the weights as the bf16 file stores them (parameters
        # only: rounding the rotary buffers too would not be what a loader computes).
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    saved = copy.deepcopy(model).to(dtype)
    saved.save_pretrained(d, safe_serialization=True)
    ref = {"note": note, "prompts": record(model, tok)}
    if dtype == torch.bfloat16:
        # What transformers computes when it loads the checkpoint in bf16.
        m16 = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager")
        m16.generation_config.eos_token_id = None
        ref["bf16"] = record(m16.eval(), tok)
    tok.save(str(d / "tokenizer.json"))
    if rewrite_config:
        cfg = json.loads((d / "config.json").read_text())
        rewrite_config(cfg)
        (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (d / "generation_config.json").unlink(missing_ok=True)
    (d / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(name, "min greedy margin", min(p["greedy_min_margin"] for p in ref["prompts"]))


def main():
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    gtok, ltok = gpt2_tokenizer(), llama3_tokenizer()
    (OUT / "tokenizer_probes.json").write_text(
        json.dumps(
            {
                name: [{"text": t, "ids": tok.encode(t).ids, "decoded": tok.decode(tok.encode(t).ids)} for t in TOKENIZER_PROBES]
                for name, tok in [("gpt2", gtok), ("llama3", ltok)]
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    v = ltok.get_vocab_size()
    bos, eos = ltok.token_to_id("<|begin_of_text|>"), ltok.token_to_id("<|end_of_text|>")
    common = dict(
        vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, bos_token_id=bos, eos_token_id=eos,
        attn_implementation="eager",
    )

    # Llama with grouped-query attention, untied head, default rope, f32.
    cfg = transformers.LlamaConfig(max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False, **common)
    m = transformers.LlamaForCausalLM(cfg)
    reinit(m, 1)
    write_model("llama_gqa", m, ltok, torch.float32, "Llama, GQA 4/2 heads, untied head, default rope, f32")

    # Llama with Llama 3.1 rope scaling and a tied head, saved in bf16.
    cfg = transformers.LlamaConfig(
        max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        **common,
    )
    m = transformers.LlamaForCausalLM(cfg)
    reinit(m, 2)
    write_model("llama_bf16", m, ltok, torch.bfloat16, "Llama, tied head, llama3 rope scaling, saved in bf16")

    # Qwen2: q/k/v biases, tied head, linear rope scaling; config rewritten to the
    # transformers 4.x form (rope_theta + rope_scaling) to test that reader.
    cfg = transformers.Qwen2Config(
        max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0}, **common,
    )
    m = transformers.Qwen2ForCausalLM(cfg)
    reinit(m, 3)

    def to_4x(c):
        rp = c.pop("rope_parameters")
        c["rope_theta"] = rp.pop("rope_theta")
        c["rope_scaling"] = {"type": rp.pop("rope_type"), **rp}
        c["torch_dtype"] = c.pop("dtype", "float32")

    write_model("qwen2", m, ltok, torch.float32, "Qwen2, q/k/v biases, tied head, linear rope (4.x config form), f32", to_4x)

    # Mistral: sliding window of 8 over prompts of ~12 tokens + 20 generated, dynamic rope.
    cfg = transformers.MistralConfig(
        max_position_embeddings=16, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=8,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, **common,
    )
    m = transformers.MistralForCausalLM(cfg)
    reinit(m, 4)
    write_model("mistral_window", m, ltok, torch.float32, "Mistral, sliding window 8, dynamic rope past 16 positions, f32")

    # GPT-2.
    gv = gtok.get_vocab_size()
    geos = gtok.token_to_id("<|endoftext|>")
    cfg = transformers.GPT2Config(
        vocab_size=gv, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=geos, eos_token_id=geos,
        attn_implementation="eager",
    )
    m = transformers.GPT2LMHeadModel(cfg)
    reinit(m, 5)
    write_model("gpt2", m, gtok, torch.float32, "GPT-2, learned positions, Conv1D weights, f32")

    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"fixtures: {total / 1e6:.2f} MB in {OUT}")


if __name__ == "__main__":
    main()
