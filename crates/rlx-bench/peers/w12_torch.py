"""W12 peer: PyTorch eager (transformers' LlamaForCausalLM) with a KV cache, batch 1.

Loads the Hugging Face checkpoint directory that `rlx-bench --workloads W12` writes,
prefills the same prompt ids rlx feeds (`(i * 7919 + 13) % vocab`), then generates
greedily one token at a time through `past_key_values` (a hand-written loop rather than
`generate()`, so that prefill and decode are timed separately and nothing else runs
between steps). One warm-up run, then `--repeats` timed runs; prints per dtype

    W12PEER torch <dtype> prefill_tok_s=<r1,r2,...> decode_tok_s=<r1,r2,...> tokens=<ids>

(one rate per timed run; rlx-bench reports their median);
decode counts the generated tokens after the first (which comes from the prefill logits).
Threads: `torch.set_num_threads(--threads)` (default: $OMP_NUM_THREADS, else 2).
"""

import argparse
import os
import time

import torch
from transformers import LlamaForCausalLM


def run_once(model, prompt, gen_tokens):
    """One prefill + greedy decode; returns (prefill s, decode s, generated ids)."""
    with torch.inference_mode():
        ids = torch.tensor([prompt], dtype=torch.long)
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        nxt = int(out.logits[0, -1].argmax())
        prefill = time.perf_counter() - t0
        past = out.past_key_values
        tokens = [nxt]
        t1 = time.perf_counter()
        for _ in range(gen_tokens - 1):
            out = model(
                input_ids=torch.tensor([[nxt]], dtype=torch.long),
                past_key_values=past,
                use_cache=True,
            )
            past = out.past_key_values
            nxt = int(out.logits[0, -1].argmax())
            tokens.append(nxt)
        decode = time.perf_counter() - t1
    return prefill, decode, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--dtype", default="f32,bf16", help="comma-separated: f32, bf16")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    a = ap.parse_args()
    if a.prompt_len < 1 or a.gen < 1 or a.repeats < 1:
        ap.error("--prompt-len, --gen and --repeats must be at least 1")
    torch.set_num_threads(a.threads)
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    for name in a.dtype.split(","):
        if name not in dtypes:
            ap.error(f"--dtype {name}: expected f32 or bf16")
        model = LlamaForCausalLM.from_pretrained(a.model, dtype=dtypes[name])
        model.eval()
        vocab = model.config.vocab_size
        prompt = [(i * 7919 + 13) % vocab for i in range(a.prompt_len)]
        run_once(model, prompt, a.gen)  # warm-up
        pre, dec, tokens = [], [], []
        for _ in range(a.repeats):
            p, d, tokens = run_once(model, prompt, a.gen)
            pre.append(a.prompt_len / p)
            if a.gen > 1:
                dec.append((a.gen - 1) / d)
        print(
            f"W12PEER torch {name} prefill_tok_s={','.join(f'{r:.3f}' for r in pre)} "
            f"decode_tok_s={','.join(f'{r:.3f}' for r in dec)} "
            f"tokens={','.join(map(str, tokens))}",
            flush=True,
        )


if __name__ == "__main__":
    main()
