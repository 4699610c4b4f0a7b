"""Write a tiny llama-architecture GGUF model for tests/test_e2e_llamacpp.py.

The registry packages looked at ship no GGUF small enough for a test (they download theirs at run time),
and nothing may be downloaded at run time, so the project makes its own (~300 KB): one transformer block,
64 wide, a SentencePiece vocabulary of the special tokens, the 256 byte tokens and 12 words, random
weights from a fixed seed. llama.cpp loads and runs it like any other llama model.

The weights are random except where they make the answers predictable enough to test (the comments in
`write` say how): the model answers in words only, never in byte tokens (one could split a character and
decode as nothing), and ends by itself once words make up ~15% of the context. For the test's prompts,
~50 tokens, that is 9 or 10 words at any temperature; greedy, "the quick brown fox jumps over a lazy
dog". So an answer either stops by itself or runs into a smaller max_tokens.

Run with the Python that has the `gguf` package (the llama.cpp venv, see the Makefile):
`python tests/tiny_gguf.py OUT.gguf`.
"""

from __future__ import annotations

import sys

import gguf
import numpy as np

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "gateway", "routes")
N_EMBD = 64
N_FF = 128
N_HEAD = 4
N_CTX = 2048
EOS = 2  # the token id of </s>


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and SentencePiece token types: unknown, control, bytes, then words and letters."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581" + w for w in WORDS]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * (3 + 256) + [float(len(p)) for p in pieces]  # other text falls back to bytes
    return tokens, scores, [int(t) for t in types]


def write(path: str) -> None:
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(32)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("ultraroute-tiny-test")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(EOS)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}")

    def small(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    word = np.array([t == int(gguf.TokenType.NORMAL) for t in types], dtype=np.float32)
    embeddings = small(n_vocab, N_EMBD)
    embeddings[:, 0] = 10.0  # dominates the residual stream: the norms scale it to ~sqrt(64) = 8
    embeddings[:, 1] = 0.0  # the share of words so far, written by attention
    embeddings[:, 2] = word  # "I am a word"
    # Queries and keys of zero: every position attends evenly to all before it, so dimension 1 of the
    # attention's output is ~0.8 x the share of words among the context's tokens.
    zero = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    value, attn_output = zero.copy(), zero.copy()
    value[1, 2] = 1.0
    attn_output[1, 1] = 1.0
    # Only dimensions 0 and 1 reach the logits: a word's is 2 x 8 = 16 whatever came before; the end's
    # starts at -16 and climbs ~3 a word, passing 16 once words are ~15% of the context.
    final_norm = np.zeros(N_EMBD, dtype=np.float32)
    final_norm[:2] = 1.0
    output = small(n_vocab, N_EMBD)
    output[:, 0] = np.where(word > 0, 2.0, -2.0)
    output[:, 1] = 0.0
    output[EOS, 1] = 350.0
    ones = np.ones(N_EMBD, dtype=np.float32)
    writer.add_tensor("token_embd.weight", embeddings)
    writer.add_tensor("output_norm.weight", final_norm)
    writer.add_tensor("output.weight", output)
    writer.add_tensor("blk.0.attn_norm.weight", ones)
    writer.add_tensor("blk.0.attn_q.weight", zero)
    writer.add_tensor("blk.0.attn_k.weight", zero.copy())
    writer.add_tensor("blk.0.attn_v.weight", value)
    writer.add_tensor("blk.0.attn_output.weight", attn_output)
    writer.add_tensor("blk.0.ffn_norm.weight", ones.copy())
    writer.add_tensor("blk.0.ffn_gate.weight", small(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_up.weight", small(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_down.weight", small(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    write(sys.argv[1])
