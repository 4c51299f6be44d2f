#!/usr/bin/env python3
"""Generates a deep-MLP training-step plan under DP x TP x PP with microbatches, for benchmarks.

    python3 bench/make_mlp_plan.py --layers 32 --dp 2 --tp 2 --pp 2 --microbatches 4 -o plan.json

The model is L Megatron MLP blocks (column-parallel fc1, relu, row-parallel fc2 with the TP
all-reduce), a replicated output head and a mean cross-entropy loss, then the backward (the TP
all-reduce of the input gradient of every block but the first), gradient accumulation over the
microbatches, the DP gradient all-reduce with reduce=mean, and an SGD step. Blocks are assigned
to pipeline stages contiguously; activations go forward and their gradients back with send_recv.
Every microbatch scales its loss gradient by 1/microbatches, as Megatron does. Lineage is
recorded for every tensor with the exact coefficients (1/dp for activation gradients).

This is a benchmark workload written in Python so the engine can be measured before the C++
plan generator exists; it is not part of the product.
"""
import argparse
import json
from fractions import Fraction


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--microbatch-size", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=16)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--indent", type=int, default=None, help="pretty-print the JSON")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    L, DP, TP, PP, M = a.layers, a.dp, a.tp, a.pp, a.microbatches
    b, H, F, C = a.microbatch_size, a.hidden, a.ffn, a.classes
    if L % PP or F % TP or L < 1:
        ap.error("layers must divide by pp and ffn by tp")
    B = b * DP * M
    Fs = F // TP
    per_stage = L // PP

    def rank(d, s, t):
        return (d * PP + s) * TP + t

    logical_t, logical_o, par_t, par_o, lineage = [], [], [], [], []

    def lt(i, shape, role, dtype=None):
        t = {"id": i, "shape": shape, "role": role}
        if dtype:
            t["dtype"] = dtype
        logical_t.append(t)

    def lop(i, op, ins, outs, attrs=None, phase="forward"):
        o = {"id": i, "op": op, "inputs": ins, "outputs": outs}
        if phase != "forward":
            o["phase"] = phase
        if attrs:
            o["attrs"] = attrs
        logical_o.append(o)

    def pt(i, shape, role, r, mb=None, dtype=None):
        t = {"id": i, "shape": shape, "role": role, "rank": r}
        if dtype:
            t["dtype"] = dtype
        if mb is not None:
            t["microbatch"] = mb
        par_t.append(t)
        return i

    def pop(i, op, ins, outs, rank=None, group=None, attrs=None, phase=None, mb=None):
        o = {"id": i, "op": op}
        if rank is not None:
            o["rank"] = rank
        if group is not None:
            o["group"] = group
        if mb is not None:
            o["microbatch"] = mb
        if phase:
            o["phase"] = phase
        o["inputs"], o["outputs"] = ins, outs
        if attrs:
            o["attrs"] = attrs
        par_o.append(o)

    def term(t, c=Fraction(1)):
        return t if c == 1 else {"tensor": t, "coeff": str(c)}

    def rec(logical, slices):
        lineage.append({"logical": logical, "slices": [{"box": [list(x) for x in box], "copies": copies}
                                                       for box, copies in slices]})

    def rows(d, m):
        lo = (d * M + m) * b
        return (lo, lo + b)

    stage_of = lambda i: i // per_stage
    last = PP - 1
    inv_dp = Fraction(1, DP)

    # ----- logical plan -----
    lt("x", [B, H], "input")
    lt("labels", [B], "input", "int")
    lt("dloss", [], "gradient")
    lt("w_out", [C, H], "weight")
    for i in range(L):
        lt(f"w1_{i}", [F, H], "weight")
        lt(f"w2_{i}", [H, F], "weight")
    prev = "x"
    for i in range(L):
        for n, s in [(f"u{i}", [B, F]), (f"r{i}", [B, F]), (f"a{i + 1}", [B, H])]:
            lt(n, s, "activation")
        lop(f"fc1_{i}", "linear", [prev, f"w1_{i}"], [f"u{i}"])
        lop(f"relu_{i}", "relu", [f"u{i}"], [f"r{i}"])
        lop(f"fc2_{i}", "linear", [f"r{i}", f"w2_{i}"], [f"a{i + 1}"])
        prev = f"a{i + 1}"
    lt("logits", [B, C], "activation")
    lt("loss", [], "loss")
    lop("head", "linear", [prev, "w_out"], ["logits"])
    lop("loss_fn", "cross_entropy", ["logits", "labels"], ["loss"])
    lt("dlogits", [B, C], "gradient")
    lt(f"da{L}", [B, H], "gradient")
    lt("dw_out", [C, H], "gradient")
    lop("loss_fn_bw", "cross_entropy_backward", ["logits", "labels", "dloss"], ["dlogits"], phase="backward")
    lop("head_bw_data", "matmul", ["dlogits", "w_out"], [f"da{L}"], phase="backward")
    lop("head_bw_weight", "matmul", ["dlogits", prev], ["dw_out"], {"transpose_a": True}, phase="backward")
    for i in reversed(range(L)):
        a_in = "x" if i == 0 else f"a{i}"
        lt(f"dr{i}", [B, F], "gradient")
        lt(f"dw2_{i}", [H, F], "gradient")
        lt(f"du{i}", [B, F], "gradient")
        lt(f"dw1_{i}", [F, H], "gradient")
        lop(f"fc2_bw_data_{i}", "matmul", [f"da{i + 1}", f"w2_{i}"], [f"dr{i}"], phase="backward")
        lop(f"fc2_bw_weight_{i}", "matmul", [f"da{i + 1}", f"r{i}"], [f"dw2_{i}"], {"transpose_a": True}, phase="backward")
        lop(f"relu_bw_{i}", "relu_backward", [f"u{i}", f"dr{i}"], [f"du{i}"], phase="backward")
        lop(f"fc1_bw_weight_{i}", "matmul", [f"du{i}", a_in], [f"dw1_{i}"], {"transpose_a": True}, phase="backward")
        if i > 0:
            lt(f"da{i}", [B, H], "gradient")
            lop(f"fc1_bw_data_{i}", "matmul", [f"du{i}", f"w1_{i}"], [f"da{i}"], phase="backward")
    weights = [("w_out", [C, H], None)] + [(f"w1_{i}", [F, H], 0) for i in range(L)] + [(f"w2_{i}", [H, F], 1) for i in range(L)]
    for w, s, _ in weights:
        lt(f"{w}_new", s, "weight")
        lop(f"sgd_{w}", "sgd", [w, "d" + w], [f"{w}_new"], {"lr": "1/10"}, phase="optimizer")

    # ----- parallel plan -----
    def wshard(w, sdim, t):
        return w if sdim is None else w  # name helper below decides the shard

    def wshape(full, sdim):
        s = list(full)
        if sdim is not None:
            s[sdim] //= TP
        return s

    def wstage(w):
        if w == "w_out":
            return last
        return stage_of(int(w.split("_")[1]))

    for d in range(DP):
        for t in range(TP):
            for w, s, sdim in weights:
                r = rank(d, wstage(w), t)
                pt(f"{w}@r{r}", wshape(s, sdim), "weight", r)
            for m in range(M):
                r0, rl = rank(d, 0, t), rank(d, last, t)
                pt(f"x.mb{m}@r{r0}", [b, H], "input", r0, m)
                pt(f"labels.mb{m}@r{rl}", [b], "input", rl, m, "int")
                pt(f"dloss.mb{m}@r{rl}", [], "gradient", rl, m)

    def tp_group(d, s):
        return [rank(d, s, t) for t in range(TP)]

    # Forward, microbatch by microbatch (GPipe order within a step).
    act = {}  # (d, m, t) -> name of the current activation on the current stage
    for d in range(DP):
        for m in range(M):
            for t in range(TP):
                act[(d, m, t)] = f"x.mb{m}@r{rank(d, 0, t)}"
    for i in range(L):
        s = stage_of(i)
        for d in range(DP):
            for m in range(M):
                if i > 0 and stage_of(i - 1) != s:
                    for t in range(TP):
                        src, dst = rank(d, s - 1, t), rank(d, s, t)
                        name = pt(f"a{i}.mb{m}@r{dst}", [b, H], "activation", dst, m)
                        pop(f"send_a{i}.mb{m}@r{src}->r{dst}", "send_recv", [act[(d, m, t)]], [name], group=[src, dst], mb=m)
                        act[(d, m, t)] = name
                partial = []
                for t in range(TP):
                    r = rank(d, s, t)
                    sfx = f".mb{m}@r{r}"
                    pt(f"u{i}{sfx}", [b, Fs], "activation", r, m)
                    pt(f"r{i}{sfx}", [b, Fs], "activation", r, m)
                    out = f"a{i + 1}{sfx}" if TP == 1 else f"a{i + 1}.partial{sfx}"
                    pt(out, [b, H], "activation", r, m)
                    pop(f"fc1_{i}{sfx}", "linear", [act[(d, m, t)], f"w1_{i}@r{r}"], [f"u{i}{sfx}"], rank=r, mb=m)
                    pop(f"relu_{i}{sfx}", "relu", [f"u{i}{sfx}"], [f"r{i}{sfx}"], rank=r, mb=m)
                    pop(f"fc2_{i}{sfx}", "linear", [f"r{i}{sfx}", f"w2_{i}@r{r}"], [out], rank=r, mb=m)
                    partial.append(out)
                outs = []
                for t in range(TP):
                    r = rank(d, s, t)
                    outs.append(f"a{i + 1}.mb{m}@r{r}")
                    if TP > 1:
                        pt(outs[-1], [b, H], "activation", r, m)
                    act[(d, m, t)] = outs[-1]
                if TP > 1:
                    pop(f"fc2_allreduce_{i}.mb{m}.dp{d}.pp{s}", "all_reduce", partial, outs, group=tp_group(d, s), mb=m)
    grads = {}  # weight name -> list of (d, t, m, tensor)
    for d in range(DP):
        for m in range(M):
            for t in range(TP):
                r = rank(d, last, t)
                sfx = f".mb{m}@r{r}"
                a_l = act[(d, m, t)]
                for n, shp in [("logits", [b, C]), ("loss", []), ("dloss_scaled", []), ("dlogits", [b, C]), (f"da{L}", [b, H]), ("dw_out", [C, H])]:
                    role = "activation" if n == "logits" else ("loss" if n == "loss" else "gradient")
                    pt(n + sfx, shp, role, r, m)
                pop("head" + sfx, "linear", [a_l, f"w_out@r{r}"], ["logits" + sfx], rank=r, mb=m)
                pop("loss_fn" + sfx, "cross_entropy", ["logits" + sfx, f"labels{sfx}"], ["loss" + sfx], rank=r, mb=m)
                pop("loss_scale" + sfx, "mul_scalar", [f"dloss{sfx}"], ["dloss_scaled" + sfx], rank=r, mb=m,
                    attrs={"value": str(Fraction(1, M))}, phase="backward")
                pop("loss_fn_bw" + sfx, "cross_entropy_backward", ["logits" + sfx, f"labels{sfx}", "dloss_scaled" + sfx],
                    ["dlogits" + sfx], rank=r, mb=m, phase="backward")
                pop("head_bw_data" + sfx, "matmul", ["dlogits" + sfx, f"w_out@r{r}"], [f"da{L}" + sfx], rank=r, mb=m, phase="backward")
                pop("head_bw_weight" + sfx, "matmul", ["dlogits" + sfx, a_l], ["dw_out" + sfx], rank=r, mb=m,
                    attrs={"transpose_a": True}, phase="backward")
                grads.setdefault("w_out", []).append((d, t, m, "dw_out" + sfx))
                act[(d, m, t)] = f"da{L}" + sfx
    # Backward through the blocks.
    for i in reversed(range(L)):
        s = stage_of(i)
        for d in range(DP):
            for m in range(M):
                if stage_of(min(i + 1, L - 1)) != s and i + 1 < L:
                    for t in range(TP):
                        src, dst = rank(d, s + 1, t), rank(d, s, t)
                        name = pt(f"da{i + 1}.mb{m}@r{dst}", [b, H], "gradient", dst, m)
                        pop(f"send_da{i + 1}.mb{m}@r{src}->r{dst}", "send_recv", [act[(d, m, t)]], [name], group=[src, dst], mb=m, phase="backward")
                        act[(d, m, t)] = name
                elif i == L - 1 and last != s:
                    for t in range(TP):
                        src, dst = rank(d, last, t), rank(d, s, t)
                        name = pt(f"da{L}.mb{m}@r{dst}", [b, H], "gradient", dst, m)
                        pop(f"send_da{L}.mb{m}@r{src}->r{dst}", "send_recv", [act[(d, m, t)]], [name], group=[src, dst], mb=m, phase="backward")
                        act[(d, m, t)] = name
                partial = []
                for t in range(TP):
                    r = rank(d, s, t)
                    sfx = f".mb{m}@r{r}"
                    a_in = f"x.mb{m}@r{r}" if i == 0 else (f"a{i}.mb{m}@r{r}")
                    for n, shp in [(f"dr{i}", [b, Fs]), (f"dw2_{i}", [H, Fs]), (f"du{i}", [b, Fs]), (f"dw1_{i}", [Fs, H])]:
                        pt(n + sfx, shp, "gradient", r, m)
                    pop(f"fc2_bw_data_{i}{sfx}", "matmul", [act[(d, m, t)], f"w2_{i}@r{r}"], [f"dr{i}{sfx}"], rank=r, mb=m, phase="backward")
                    pop(f"fc2_bw_weight_{i}{sfx}", "matmul", [act[(d, m, t)], f"r{i}{sfx}"], [f"dw2_{i}{sfx}"], rank=r, mb=m,
                        attrs={"transpose_a": True}, phase="backward")
                    pop(f"relu_bw_{i}{sfx}", "relu_backward", [f"u{i}{sfx}", f"dr{i}{sfx}"], [f"du{i}{sfx}"], rank=r, mb=m, phase="backward")
                    pop(f"fc1_bw_weight_{i}{sfx}", "matmul", [f"du{i}{sfx}", a_in], [f"dw1_{i}{sfx}"], rank=r, mb=m,
                        attrs={"transpose_a": True}, phase="backward")
                    grads.setdefault(f"w2_{i}", []).append((d, t, m, f"dw2_{i}{sfx}"))
                    grads.setdefault(f"w1_{i}", []).append((d, t, m, f"dw1_{i}{sfx}"))
                    if i > 0:
                        out = f"da{i}{sfx}" if TP == 1 else f"da{i}.partial{sfx}"
                        pt(out, [b, H], "gradient", r, m)
                        pop(f"fc1_bw_data_{i}{sfx}", "matmul", [f"du{i}{sfx}", f"w1_{i}@r{r}"], [out], rank=r, mb=m, phase="backward")
                        partial.append(out)
                if i > 0:
                    outs = []
                    for t in range(TP):
                        r = rank(d, s, t)
                        outs.append(f"da{i}.mb{m}@r{r}")
                        if TP > 1:
                            pt(outs[-1], [b, H], "gradient", r, m)
                        act[(d, m, t)] = outs[-1]
                    if TP > 1:
                        pop(f"fc1_bw_allreduce_{i}.mb{m}.dp{d}.pp{s}", "all_reduce", partial, outs, group=tp_group(d, s), mb=m, phase="backward")
    # Accumulation over microbatches, DP all-reduce (mean), SGD.
    final_grad = {}
    for w, shp, sdim in weights:
        ws = wshape(shp, sdim)
        for d in range(DP):
            for t in range(TP):
                r = rank(d, wstage(w), t)
                parts = [g for (dd, tt, m, g) in grads[w] if dd == d and tt == t]
                acc = parts[0]
                for k in range(1, len(parts)):
                    name = pt(f"d{w}.acc{k}@r{r}", ws, "gradient", r)
                    pop(f"accumulate_d{w}.{k}@r{r}", "add", [acc, parts[k]], [name], rank=r, phase="backward")
                    acc = name
                final_grad[(w, d, t)] = acc
        for t in range(TP):
            group = [rank(d, wstage(w), t) for d in range(DP)]
            if DP > 1:
                outs = [pt(f"d{w}.reduced@r{r}", ws, "gradient", r) for r in group]
                pop(f"dp_allreduce_d{w}.tp{t}", "all_reduce", [final_grad[(w, d, t)] for d in range(DP)], outs,
                    group=group, attrs={"reduce": "mean"}, phase="backward")
                for d in range(DP):
                    final_grad[(w, d, t)] = outs[d]
            for d in range(DP):
                r = rank(d, wstage(w), t)
                pt(f"{w}_new@r{r}", ws, "weight", r)
                pop(f"sgd_{w}@r{r}", "sgd", [f"{w}@r{r}", final_grad[(w, d, t)]], [f"{w}_new@r{r}"], rank=r,
                    attrs={"lr": "1/10"}, phase="optimizer")

    # ----- lineage -----
    def box_rows(d, m, ncols):
        return [rows(d, m), (0, ncols)]

    def box_shard(d, m, t, width):
        return [rows(d, m), (t * width, (t + 1) * width)]

    rec("x", [(box_rows(d, m, H), [[f"x.mb{m}@r{rank(d, 0, t)}"] for t in range(TP)]) for d in range(DP) for m in range(M)])
    rec("labels", [([rows(d, m)], [[f"labels.mb{m}@r{rank(d, last, t)}"] for t in range(TP)]) for d in range(DP) for m in range(M)])
    rec("dloss", [([], [[f"dloss.mb{m}@r{rank(d, last, t)}"] for d in range(DP) for m in range(M) for t in range(TP)])])
    for w, shp, sdim in weights:
        if sdim is None:
            rec(w, [([(0, n) for n in shp], [[f"{w}@r{rank(d, wstage(w), t)}"] for d in range(DP) for t in range(TP)])])
        else:
            sl = []
            for t in range(TP):
                box = [(0, n) for n in shp]
                box[sdim] = (t * shp[sdim] // TP, (t + 1) * shp[sdim] // TP)
                sl.append((box, [[f"{w}@r{rank(d, wstage(w), t)}"] for d in range(DP)]))
            rec(w, sl)
    for i in range(L):
        s = stage_of(i)
        for n in (f"u{i}", f"r{i}"):
            rec(n, [(box_shard(d, m, t, Fs), [[f"{n}.mb{m}@r{rank(d, s, t)}"]]) for d in range(DP) for m in range(M) for t in range(TP)])
        an = f"a{i + 1}"
        if TP > 1:
            rec(an, [(box_rows(d, m, H), [[f"{an}.partial.mb{m}@r{rank(d, s, t)}" for t in range(TP)]]) for d in range(DP) for m in range(M)])
        nxt = stage_of(i + 1) if i + 1 < L else last
        holders = [s] if nxt == s else [s, nxt]
        rec(an, [(box_rows(d, m, H), [[f"{an}.mb{m}@r{rank(d, ss, t)}"] for ss in holders for t in range(TP)]) for d in range(DP) for m in range(M)])
    rec("logits", [(box_rows(d, m, C), [[f"logits.mb{m}@r{rank(d, last, t)}"] for t in range(TP)]) for d in range(DP) for m in range(M)])
    rec("loss", [([], [[term(f"loss.mb{m}@r{rank(d, last, t)}", Fraction(1, DP * M)) for d in range(DP) for m in range(M)] for t in range(TP)])])
    rec("dlogits", [(box_rows(d, m, C), [[term(f"dlogits.mb{m}@r{rank(d, last, t)}", inv_dp)] for t in range(TP)]) for d in range(DP) for m in range(M)])
    s_last_block = stage_of(L - 1)
    holders = [last] if s_last_block == last else [last, s_last_block]
    rec(f"da{L}", [(box_rows(d, m, H), [[term(f"da{L}.mb{m}@r{rank(d, ss, t)}", inv_dp)] for ss in holders for t in range(TP)]) for d in range(DP) for m in range(M)])
    for i in reversed(range(L)):
        s = stage_of(i)
        for n in (f"dr{i}", f"du{i}"):
            rec(n, [(box_shard(d, m, t, Fs), [[term(f"{n}.mb{m}@r{rank(d, s, t)}", inv_dp)]]) for d in range(DP) for m in range(M) for t in range(TP)])
        if i > 0:
            n = f"da{i}"
            if TP > 1:
                rec(n, [(box_rows(d, m, H), [[term(f"{n}.partial.mb{m}@r{rank(d, s, t)}", inv_dp) for t in range(TP)]]) for d in range(DP) for m in range(M)])
            prev_s = stage_of(i - 1)
            holders = [s] if prev_s == s else [s, prev_s]
            rec(n, [(box_rows(d, m, H), [[term(f"{n}.mb{m}@r{rank(d, ss, t)}", inv_dp)] for ss in holders for t in range(TP)]) for d in range(DP) for m in range(M)])
    for w, shp, sdim in weights:
        def slices_for(make_copies):
            if sdim is None:
                return [([(0, n) for n in shp], make_copies(None))]
            out = []
            for t in range(TP):
                box = [(0, n) for n in shp]
                box[sdim] = (t * shp[sdim] // TP, (t + 1) * shp[sdim] // TP)
                out.append((box, make_copies(t)))
            return out
        tps = lambda t: range(TP) if t is None else [t]
        # Per-microbatch contributions (one copy per TP rank that holds the weight).
        rec("d" + w, slices_for(lambda t: [[term(g, inv_dp) for (d, tt, m, g) in grads[w] if tt == u] for u in tps(t)]))
        if M > 1:
            rec("d" + w, slices_for(lambda t: [[term(f"d{w}.acc{M - 1}@r{rank(d, wstage(w), u)}", inv_dp) for d in range(DP)] for u in tps(t)]))
        if DP > 1:
            rec("d" + w, slices_for(lambda t: [[f"d{w}.reduced@r{rank(d, wstage(w), u)}"] for u in tps(t) for d in range(DP)]))
        rec(f"{w}_new", slices_for(lambda t: [[f"{w}_new@r{rank(d, wstage(w), u)}"] for u in tps(t) for d in range(DP)]))

    doc = {"format": "trainverify-plan", "version": 1,
           "name": f"mlp-l{L}-dp{DP}-tp{TP}-pp{PP}-mb{M}",
           "description": (f"A {L}-block MLP training step under DP={DP}, TP={TP}, PP={PP} with {M} microbatches: "
                           "Megatron column/row-parallel blocks with the TP all-reduce in forward and backward, "
                           "blocks split across pipeline stages with send/recv, per-microbatch loss scaling, "
                           "gradient accumulation, the DP gradient all-reduce (mean) and SGD. Generated by "
                           "bench/make_mlp_plan.py."),
           "expect": {"verdict": "equivalent"},
           "logical": {"tensors": logical_t, "ops": logical_o},
           "parallel": {"mesh": {"dp": DP, "tp": TP, "pp": PP}, "microbatches": M, "tensors": par_t, "ops": par_o},
           "lineage": lineage}
    with open(a.output, "w") as f:
        if a.indent is None:
            json.dump(doc, f, separators=(",", ":"))
        else:
            json.dump(doc, f, indent=a.indent)
        f.write("\n")
    print(f"{a.output}: {len(logical_o)} logical ops, {len(par_o)} parallel ops, {len(par_t)} parallel tensors, "
          f"{len(lineage)} lineage records, {DP * TP * PP} ranks")


if __name__ == "__main__":
    main()
