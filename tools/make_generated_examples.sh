#!/usr/bin/env bash
# Regenerates the bundled examples that come from `trainverify generate` (the hand-written ones
# come from tools/make_examples.py). Run from the source tree after building (preset dev).
set -euo pipefail
cd "$(dirname "$0")/.."
tv=build/app/trainverify
out=resources/examples
# Llama 3 (one block, GQA, RoPE, SwiGLU) under Megatron tensor + sequence parallelism.
$tv generate --model llama3 --layers 1 --tp 2 --sp --format 2 -o $out/llama3-tp2-sp.json
# A data-parallel plan stored once for both replicas (plan format 2), with tensor parallelism.
$tv generate --model mlp --layers 2 --hidden 16 --ffn 32 --vocab 8 --dp 2 --tp 2 --format 2 -o $out/mlp-dp2-tp2-replicas.json
# GPT-2 (LayerNorm, GELU, learned positions, tied embeddings) over two pipeline stages, 1F1B,
# every microbatch written out (plan format 1).
$tv generate --model gpt2 --layers 2 --hidden 32 --heads 2 --ffn 64 --vocab 64 --seq 8 --pp 2 --microbatches 2 --format 1 -o $out/gpt2-pp2.json
# ZeRO-1 over two replicas: optimizer state split over the replicas, stored once (plan format 2).
$tv generate --model mlp --layers 2 --hidden 16 --ffn 32 --vocab 8 --dp 2 --zero 1 --format 2 -o $out/mlp-dp2-zero1.json
# Two replicas and two pipeline stages with four microbatches, all stored once (plan format 2):
# microbatch 0 of replica 0 stands for every lane; gradients accumulate in one op per rank.
$tv generate --model mlp --layers 2 --hidden 16 --ffn 32 --vocab 8 --dp 2 --pp 2 --microbatches 4 --format 2 -o $out/mlp-dp2-pp2-nm4-lanes.json
# Context parallelism: one Llama 3 block with the sequence split over two ranks, K and V
# all-gathered for attention, the weight gradients all-reduced over the cp group.
$tv generate --model llama3 --layers 1 --cp 2 --format 2 -o $out/llama3-cp2.json
# Four Llama 3 blocks under dp2 tp2 pp2 with two microbatches, stored with repeats (plan format
# 3, the generator's default): replicas and microbatches once, and each block after the first on
# a stage a repeat of the one before it, renamed and shifted to its ranks.
$tv generate --model llama3 --layers 4 --dp 2 --tp 2 --pp 2 --microbatches 2 -o $out/llama3-l4-dp2-tp2-pp2-nm2-repeats.json
# Ring attention: the same block with K/V passed around the cp group and an online softmax.
$tv generate --model llama3 --layers 1 --cp 2 --cp-comm p2p --format 2 -o $out/llama3-cp2-ring.json
