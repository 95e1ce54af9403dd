#!/usr/bin/env python3
"""Writes tests/data/llama-moe-mxfp4.gguf: a tiny llama mixture of experts
(one layer, two experts, n_embd 32) whose expert tensors are MXFP4, as
gpt-oss's are, and every other weight F16 or F32.

--expert-type F16 writes the same model with F16 experts, and
--expert-type F64 (tests/data/llama-moe-f64.gguf) with F64 experts: a GGUF
type qlens names and sizes but does not compute with, so that the tests can
see every tool name the type instead of failing on anything else. The weights are
exact small fractions (no random numbers, no transcendental functions), so
the file is the same bytes on every machine; the MXFP4 blocks are gguf-py's
reference quantization of them.

Needs the gguf package (PyPI gguf >= 0.17 knows MXFP4 = 39) and numpy:
    python3 tests/data/make_mxfp4_moe.py tests/data/llama-moe-mxfp4.gguf
"""
import argparse

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

N_EMBD, N_HEAD, N_HEAD_KV, N_FF_EXP, N_EXPERT, N_VOCAB = 32, 2, 1, 32, 2, 12
HEAD_DIM = N_EMBD // N_HEAD


def weights(shape, salt):
    """Values in [-0.875, 0.875] in steps of 1/16: exact in F16 and F32."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    return (((i * 37 + salt * 11) % 29 - 14) / 16.0).astype(np.float32).reshape(shape)


def add_vocab(w):
    # A SentencePiece vocabulary: <unk>, <s>, </s>, the space piece, letters.
    tokens = ["<unk>", "<s>", "</s>", "\u2581"] + [chr(ord("a") + k) for k in range(N_VOCAB - 4)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(k) for k in range(N_VOCAB)])
    w.add_token_types([2, 3, 3] + [1] * (N_VOCAB - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def add_hparams(w, expert_type):
    w.add_name("qlens-test-llama-moe-" + expert_type.lower())
    w.add_context_length(64)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF_EXP)
    w.add_block_count(1)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(1)
    w.add_expert_feed_forward_length(N_FF_EXP)
    w.add_vocab_size(N_VOCAB)


def add_tensors(w, expert_type):
    # Shapes as numpy gives them: the reverse of ggml's ne.
    f16 = {
        "token_embd.weight": (N_VOCAB, N_EMBD),
        "blk.0.attn_q.weight": (N_EMBD, N_EMBD),
        "blk.0.attn_k.weight": (N_HEAD_KV * HEAD_DIM, N_EMBD),
        "blk.0.attn_v.weight": (N_HEAD_KV * HEAD_DIM, N_EMBD),
        "blk.0.attn_output.weight": (N_EMBD, N_EMBD),
        "output.weight": (N_VOCAB, N_EMBD),
    }
    f32 = {
        "blk.0.attn_norm.weight": (N_EMBD,),
        "blk.0.ffn_norm.weight": (N_EMBD,),
        "blk.0.ffn_gate_inp.weight": (N_EXPERT, N_EMBD),
        "output_norm.weight": (N_EMBD,),
    }
    experts = {
        "blk.0.ffn_gate_exps.weight": (N_EXPERT, N_FF_EXP, N_EMBD),
        "blk.0.ffn_up_exps.weight": (N_EXPERT, N_FF_EXP, N_EMBD),
        "blk.0.ffn_down_exps.weight": (N_EXPERT, N_EMBD, N_FF_EXP),
    }
    for salt, (name, shape) in enumerate([*f16.items(), *f32.items(), *experts.items()]):
        x = weights(shape, salt)
        if name.endswith("norm.weight"):
            x = 1.0 + x / 8.0
        if name in f16 or (name in experts and expert_type == "F16"):
            w.add_tensor(name, x.astype(np.float16))
        elif name in experts and expert_type == "F64":
            w.add_tensor(name, x.astype(np.float64))
        elif name in experts:
            q = quantize(x, GGMLQuantizationType.MXFP4)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=GGMLQuantizationType.MXFP4)
        else:
            w.add_tensor(name, x)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output")
    p.add_argument("--expert-type", choices=["MXFP4", "F16", "F64"], default="MXFP4")
    args = p.parse_args()
    w = GGUFWriter(args.output, "llama")
    add_hparams(w, args.expert_type)
    add_vocab(w)
    add_tensors(w, args.expert_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
