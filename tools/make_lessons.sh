#!/usr/bin/env bash
# Regenerates the plans of the Studio's guided lessons (resources/lessons/, issue 7). Each lesson
# has a correct plan and a buggy twin; resources/lessons/lessons.json names them and holds the
# explanations (it is written by hand, not by this script).
#
#   bash tools/make_lessons.sh [path/to/trainverify]      (default: build/app/trainverify)
#
# Run from the repository root after building. Lessons use bundled examples where they fit
# (lessons.json names them as ../examples/...); the other plans come from `trainverify generate`
# and the buggy twins from `trainverify mutate -o`; the output is the same
# byte for byte on every run. `mutate` writes an expect block with the verdict and the failure
# kind; this script adds the failing op and rank (written out below, as the verifier reports
# them), then verifies every file and stops with an error if any result differs from its expect
# block, so a change in the verifier's diagnosis shows up here.
set -euo pipefail

if [[ $# -gt 0 ]]; then
  tv=$1
else
  tv=build/app/trainverify
fi
if [[ $tv != */* ]]; then
  tv=$(command -v "$tv" || echo "./$tv")
fi
if [[ ! -x $tv ]]; then
  echo "make_lessons.sh: $tv is not an executable trainverify binary (build first)" >&2
  exit 2
fi
if [[ ! -d resources/examples || ! -f tools/make_lessons.sh ]]; then
  echo "make_lessons.sh: run from the repository root" >&2
  exit 2
fi

ex=resources/examples
out=resources/lessons
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Adds failure.parallel_op and failure.rank to a plan's expect block. The plan must be in the
# canonical writer's layout (sorted keys, one-space indent), which json.dumps reproduces exactly;
# anything else is refused rather than reformatted.
set_failure() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
path, op, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, encoding="utf-8") as f:
    text = f.read()
doc = json.loads(text)
def dump(d):
    return json.dumps(d, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
if dump(doc) != text:
    sys.exit(f"{path}: not in the canonical writer's layout; not rewriting it")
failure = doc.setdefault("expect", {}).setdefault("failure", {})
failure["parallel_op"] = op
failure["rank"] = rank
with open(path, "w", encoding="utf-8") as f:
    f.write(dump(doc))
EOF
}

# mutate PLAN BUG OUT OP RANK: writes the catalog mutant of PLAN at the default site, then
# records the op and rank the verifier names.
mutant() {
  "$tv" mutate "$1" --bug "$2" -o "$3" >/dev/null
  set_failure "$3" "$4" "$5"
}

# 1. tp-allreduce: the bundled pair (the twin lacks the all-reduce after the row-parallel fc2).
# 2. dp-averaging: the bundled pair (the twin's gradient all-reduces sum instead of averaging).

# 3. pp-accumulation: two pipeline stages, two microbatches; the accumulation of fc1's weight
#    gradient keeps only the last microbatch's gradient.
mutant "$ex/mlp-pp2.json" grad-accum-missing "$out/mlp-pp2-grad-accum-missing.json" \
  "accumulate_dw1@r0" 0

# 4. sp-norm-grads: one Llama 3 block under tp2 with sequence parallelism (the bundled example);
#    the attention norm's weight gradient is not all-reduced over the tensor-parallel group.
mutant "$ex/llama3-tp2-sp.json" sp-norm-grad-not-reduced \
  "$out/llama3-tp2-sp-norm-grad-not-reduced.json" \
  "bw.layers.0.attention_norm.rmsnorm_backward.1.all_reduce@r0" 0

# 5. ep-all-to-all: a small DeepSeek (one dense layer, then one MoE layer with 8 routed experts,
#    top 2, and a shared expert) under tp2 with sequence parallelism, the experts split over the
#    two ranks (--ep 2 is what --tp 2 gives already; it is written for clarity). Everything is
#    written out (format 1). The MoE layer's dispatch all-to-all lists its members reversed.
"$tv" generate --model deepseek --layers 2 --hidden 32 --heads 4 --kv-heads 4 --ffn 32 \
  --vocab 32 --seq 4 --tp 2 --ep 2 --sp --format 1 -o "$out/deepseek-l2-tp2-ep2-sp.json" >/dev/null
mutant "$out/deepseek-l2-tp2-ep2-sp.json" all-to-all-wrong-order \
  "$out/deepseek-l2-tp2-ep2-sp-all-to-all-wrong-order.json" \
  "layers.1.moe.to_experts.all_to_all@r0" 0

# 6. zero-sharding: the bundled ZeRO-1 plan, stored once for both replicas (format 2; the bug
#    finder needs the stored form, whose chunks say they take their replica's part). The chunk of
#    layers.0.fc1's gradient takes part 0 on every replica, so replica 1 (rank 1) updates its
#    rows with replica 0's rows of the gradient. The diagnosis names replica 1's instance (~dp1).
mutant "$ex/mlp-dp2-zero1.json" zero-shard-wrong-grad \
  "$out/mlp-dp2-zero1-zero-shard-wrong-grad.json" \
  "bw.layers.0.fc1.matmul.2.dp_chunk@r0~dp1" 1

# 7. expert-data-parallel: the small DeepSeek over four replicas, its routed experts split over
#    expert-parallel groups of two (replicas 0-1 and 2-3: each holds half of the experts; tokens
#    dispatched and combined by all-to-all), each expert's gradient averaged over the two replicas
#    that hold it (0 with 2, 1 with 3). Written out (format 1) so that every rank is drawn. The
#    twin's reducers of layers.1's w1 gradient trade a member: replica 0's averages with replica 1,
#    which holds the other experts.
"$tv" generate --model deepseek --layers 2 --hidden 32 --heads 4 --kv-heads 4 --ffn 32 \
  --vocab 32 --seq 4 --dp 4 --ep 2 --format 1 -o "$out/deepseek-l2-dp4-ep2.json" >/dev/null
mutant "$out/deepseek-l2-dp4-ep2.json" ep-grad-wrong-group \
  "$out/deepseek-l2-dp4-ep2-ep-grad-wrong-group.json" \
  "bw.layers.1.moe.experts.w1.matmul.2.edp_allreduce@r0" 0

# Verify every plan and compare with its expect block (verdict; failure kind, op and rank).
files=(
  ../examples/mlp-tp2.json ../examples/mlp-tp2-missing-allreduce.json
  ../examples/mlp-dp2.json ../examples/mlp-dp2-missing-average.json
  ../examples/mlp-pp2.json mlp-pp2-grad-accum-missing.json
  ../examples/llama3-tp2-sp.json llama3-tp2-sp-norm-grad-not-reduced.json
  deepseek-l2-tp2-ep2-sp.json deepseek-l2-tp2-ep2-sp-all-to-all-wrong-order.json
  ../examples/mlp-dp2-zero1.json mlp-dp2-zero1-zero-shard-wrong-grad.json
  deepseek-l2-dp4-ep2.json deepseek-l2-dp4-ep2-ep-grad-wrong-group.json
)
status=0
for f in "${files[@]}"; do
  rc=0
  "$tv" verify "$out/$f" --json "$tmp/report.json" >/dev/null || rc=$?
  if [[ $rc -gt 1 ]]; then
    echo "FAIL $f: verify exited $rc" >&2
    status=1
    continue
  fi
  python3 - "$out/$f" "$tmp/report.json" <<'EOF' || status=1
import json, sys
plan, report = sys.argv[1], sys.argv[2]
expect = json.load(open(plan, encoding="utf-8"))["expect"]
rep = json.load(open(report, encoding="utf-8"))
got = rep.get("failure") or {}
problems = []
if rep["verdict"] != expect["verdict"]:
    problems.append(f"verdict {rep['verdict']}, expected {expect['verdict']}")
want = expect.get("failure")
if want is None:
    if rep.get("failure"):
        problems.append(f"unexpected failure {got.get('kind')} at {got.get('parallel_op')}")
else:
    for key in ("kind", "parallel_op", "rank"):
        if key in want and got.get(key) != want[key]:
            problems.append(f"{key} {got.get(key)!r}, expected {want[key]!r}")
name = plan.rsplit("/", 1)[-1]
where = f"{got.get('parallel_op')} rank {got.get('rank')}" if got else "-"
if problems:
    print(f"FAIL {name}: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"ok   {name:52} {rep['verdict']:15} {got.get('kind', '-'):15} {where} "
      f"({rep['timing']['total']:.2f} s)")
EOF
done
exit $status
