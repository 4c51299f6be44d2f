#!/usr/bin/env python3
"""Writes the bundled example plans in resources/examples/.

Each example is one training step of a two-layer MLP (forward, backward, SGD update) under one
parallelism, plus a buggy twin. Run from the repository root:  python3 tools/make_examples.py
The JSON files are checked in; this script documents how they were made and regenerates them.
"""
import copy
import json
import os
from fractions import Fraction

B, D, H, C = 8, 8, 16, 4   # batch, input features, hidden, classes
LR = "1/10"
OUT = os.path.join(os.path.dirname(__file__), "..", "resources", "examples")


class Plan:
    def __init__(self, name, description, mesh, microbatches=1):
        self.doc = {"format": "trainverify-plan", "version": 1, "name": name,
                    "description": description,
                    "logical": {"tensors": [], "ops": []},
                    "parallel": {"mesh": mesh, "microbatches": microbatches, "tensors": [], "ops": []},
                    "lineage": []}

    def lt(self, id, shape, role, dtype=None):
        t = {"id": id, "shape": shape, "role": role}
        if dtype:
            t["dtype"] = dtype
        self.doc["logical"]["tensors"].append(t)

    def lop(self, id, op, inputs, outputs, attrs=None, phase="forward"):
        o = {"id": id, "op": op, "inputs": inputs, "outputs": outputs}
        if phase != "forward":
            o["phase"] = phase
        if attrs:
            o["attrs"] = attrs
        self.doc["logical"]["ops"].append(o)

    def pt(self, id, shape, role, rank, mb=None, dtype=None):
        t = {"id": id, "shape": shape, "role": role, "rank": rank}
        if dtype:
            t["dtype"] = dtype
        if mb is not None:
            t["microbatch"] = mb
        self.doc["parallel"]["tensors"].append(t)

    def pop(self, id, op, inputs, outputs, rank=None, group=None, attrs=None, phase="forward", mb=None):
        o = {"id": id, "op": op}
        if rank is not None:
            o["rank"] = rank
        if group is not None:
            o["group"] = group
        if mb is not None:
            o["microbatch"] = mb
        if phase != ("communication" if group is not None else "forward"):
            o["phase"] = phase
        o["inputs"] = inputs
        o["outputs"] = outputs
        if attrs:
            o["attrs"] = attrs
        self.doc["parallel"]["ops"].append(o)

    def lineage(self, logical, slices):
        """slices: list of (box, copies); a copy is a list of tensor ids or (id, coeff)."""
        out = []
        for box, copies in slices:
            cs = []
            for c in copies:
                terms = []
                for t in c:
                    if isinstance(t, tuple):
                        terms.append({"tensor": t[0], "coeff": str(Fraction(t[1]))})
                    else:
                        terms.append(t)
                cs.append(terms)
            out.append({"box": [list(b) for b in box], "copies": cs})
        self.doc["lineage"].append({"logical": logical, "slices": out})

    def expect(self, verdict, **failure):
        e = {"verdict": verdict}
        if failure:
            e["failure"] = failure
        self.doc["expect"] = e

    def write(self, filename):
        with open(os.path.join(OUT, filename), "w") as f:
            json.dump(self.doc, f, indent=1)
            f.write("\n")


def full(shape):
    return [(0, s) for s in shape]


def logical_mlp(p):
    """The single-device training step every example shares."""
    p.lt("x", [B, D], "input")
    p.lt("labels", [B], "input", "int")
    p.lt("w1", [H, D], "weight")
    p.lt("w2", [C, H], "weight")
    p.lt("dloss", [], "gradient")
    for t, s, r in [("h", [B, H], "activation"), ("a", [B, H], "activation"), ("logits", [B, C], "activation"),
                    ("loss", [], "loss"), ("dlogits", [B, C], "gradient"), ("da", [B, H], "gradient"),
                    ("dw2", [C, H], "gradient"), ("dh", [B, H], "gradient"), ("dw1", [H, D], "gradient"),
                    ("w1_new", [H, D], "weight"), ("w2_new", [C, H], "weight")]:
        p.lt(t, s, r)
    p.lop("fc1", "linear", ["x", "w1"], ["h"])
    p.lop("act", "relu", ["h"], ["a"])
    p.lop("fc2", "linear", ["a", "w2"], ["logits"])
    p.lop("loss_fn", "cross_entropy", ["logits", "labels"], ["loss"])
    p.lop("loss_fn_bw", "cross_entropy_backward", ["logits", "labels", "dloss"], ["dlogits"], phase="backward")
    p.lop("fc2_bw_data", "matmul", ["dlogits", "w2"], ["da"], phase="backward")
    p.lop("fc2_bw_weight", "matmul", ["dlogits", "a"], ["dw2"], {"transpose_a": True}, phase="backward")
    p.lop("act_bw", "relu_backward", ["h", "da"], ["dh"], phase="backward")
    p.lop("fc1_bw_weight", "matmul", ["dh", "x"], ["dw1"], {"transpose_a": True}, phase="backward")
    p.lop("sgd_w1", "sgd", ["w1", "dw1"], ["w1_new"], {"lr": LR}, phase="optimizer")
    p.lop("sgd_w2", "sgd", ["w2", "dw2"], ["w2_new"], {"lr": LR}, phase="optimizer")


# ----- tensor parallelism --------------------------------------------------------------------

def mlp_tp2(drop_allreduce=False):
    tp = 2
    hs = H // tp
    name = "mlp-tp2-missing-allreduce" if drop_allreduce else "mlp-tp2"
    desc = ("Two-layer MLP training step under tensor parallelism (TP=2, Megatron style): fc1 is "
            "column-parallel (each rank holds half of the hidden units), fc2 is row-parallel (each rank "
            "computes a partial sum of the logits), and an all-reduce adds the partial sums so every rank "
            "has the full logits before the loss.")
    if drop_allreduce:
        desc = ("Buggy twin of mlp-tp2: the all-reduce after the row-parallel fc2 is missing, so each rank "
                "computes the loss from its own partial sum of the logits. The verifier finds the logits on "
                "rank 0 differ from the logical logits and points at fc2 on rank 0, the op whose output is "
                "used where the reduced value was needed.")
    p = Plan(name, desc, {"tp": tp})
    logical_mlp(p)
    for r in range(tp):
        s = f"@r{r}"
        p.pt("x" + s, [B, D], "input", r)
        p.pt("labels" + s, [B], "input", r, dtype="int")
        p.pt("w1" + s, [hs, D], "weight", r)
        p.pt("w2" + s, [C, hs], "weight", r)
        p.pt("dloss" + s, [], "gradient", r)
        p.pt("h" + s, [B, hs], "activation", r)
        p.pt("a" + s, [B, hs], "activation", r)
        if not drop_allreduce:
            p.pt("logits_partial" + s, [B, C], "activation", r)
        p.pt("logits" + s, [B, C], "activation", r)
        p.pt("loss" + s, [], "loss", r)
        p.pt("dlogits" + s, [B, C], "gradient", r)
        p.pt("da" + s, [B, hs], "gradient", r)
        p.pt("dw2" + s, [C, hs], "gradient", r)
        p.pt("dh" + s, [B, hs], "gradient", r)
        p.pt("dw1" + s, [hs, D], "gradient", r)
        p.pt("w1_new" + s, [hs, D], "weight", r)
        p.pt("w2_new" + s, [C, hs], "weight", r)
    for r in range(tp):
        s = f"@r{r}"
        p.pop("fc1" + s, "linear", ["x" + s, "w1" + s], ["h" + s], rank=r)
        p.pop("act" + s, "relu", ["h" + s], ["a" + s], rank=r)
        p.pop("fc2" + s, "linear", ["a" + s, "w2" + s], [("logits" if drop_allreduce else "logits_partial") + s], rank=r)
    if not drop_allreduce:
        p.pop("fc2_allreduce", "all_reduce", [f"logits_partial@r{r}" for r in range(tp)],
              [f"logits@r{r}" for r in range(tp)], group=list(range(tp)), attrs={"reduce": "sum"})
    for r in range(tp):
        s = f"@r{r}"
        p.pop("loss_fn" + s, "cross_entropy", ["logits" + s, "labels" + s], ["loss" + s], rank=r)
        p.pop("loss_fn_bw" + s, "cross_entropy_backward", ["logits" + s, "labels" + s, "dloss" + s], ["dlogits" + s], rank=r, phase="backward")
        p.pop("fc2_bw_data" + s, "matmul", ["dlogits" + s, "w2" + s], ["da" + s], rank=r, phase="backward")
        p.pop("fc2_bw_weight" + s, "matmul", ["dlogits" + s, "a" + s], ["dw2" + s], rank=r, attrs={"transpose_a": True}, phase="backward")
        p.pop("act_bw" + s, "relu_backward", ["h" + s, "da" + s], ["dh" + s], rank=r, phase="backward")
        p.pop("fc1_bw_weight" + s, "matmul", ["dh" + s, "x" + s], ["dw1" + s], rank=r, attrs={"transpose_a": True}, phase="backward")
        p.pop("sgd_w1" + s, "sgd", ["w1" + s, "dw1" + s], ["w1_new" + s], rank=r, attrs={"lr": LR}, phase="optimizer")
        p.pop("sgd_w2" + s, "sgd", ["w2" + s, "dw2" + s], ["w2_new" + s], rank=r, attrs={"lr": LR}, phase="optimizer")
    rep = lambda t: [(full_shape_of(t), [[f"{t}@r{r}"] for r in range(tp)])]
    def hidden_split(t, shape, dim):
        out = []
        for r in range(tp):
            box = [(0, n) for n in shape]
            box[dim] = (r * hs, (r + 1) * hs)
            out.append((box, [[f"{t}@r{r}"]]))
        return out
    shapes = {"x": [B, D], "labels": [B], "dloss": [], "logits": [B, C], "loss": [], "dlogits": [B, C]}
    full_shape_of = lambda t: full(shapes[t])
    p.lineage("x", rep("x"))
    p.lineage("labels", rep("labels"))
    p.lineage("w1", hidden_split("w1", [H, D], 0))
    p.lineage("w2", hidden_split("w2", [C, H], 1))
    p.lineage("dloss", rep("dloss"))
    p.lineage("h", hidden_split("h", [B, H], 1))
    p.lineage("a", hidden_split("a", [B, H], 1))
    if not drop_allreduce:
        # Before the all-reduce the logits are a partial sum over the TP ranks...
        p.lineage("logits", [(full([B, C]), [[f"logits_partial@r{r}" for r in range(tp)]])])
    # ...after it, every rank holds a full replica.
    p.lineage("logits", rep("logits"))
    p.lineage("loss", rep("loss"))
    p.lineage("dlogits", rep("dlogits"))
    p.lineage("da", hidden_split("da", [B, H], 1))
    p.lineage("dw2", hidden_split("dw2", [C, H], 1))
    p.lineage("dh", hidden_split("dh", [B, H], 1))
    p.lineage("dw1", hidden_split("dw1", [H, D], 0))
    p.lineage("w1_new", hidden_split("w1_new", [H, D], 0))
    p.lineage("w2_new", hidden_split("w2_new", [C, H], 1))
    if drop_allreduce:
        p.expect("not_equivalent", kind="counterexample", parallel_op="fc2@r0", rank=0)
    else:
        p.expect("equivalent")
    return p


# ----- data parallelism ----------------------------------------------------------------------

def mlp_dp2(missing_average=False):
    dp = 2
    bs = B // dp
    name = "mlp-dp2-missing-average" if missing_average else "mlp-dp2"
    desc = ("Two-layer MLP training step under data parallelism (DP=2): each rank takes half of the batch, "
            "computes the mean loss of its half and the gradients of that loss, and an all-reduce with "
            "reduce=mean averages the weight gradients, so both replicas apply the gradient of the "
            "global mean loss. Lineage coefficients of 1/2 say how each rank's values relate to the "
            "logical ones.")
    if missing_average:
        desc = ("Buggy twin of mlp-dp2: the gradient all-reduce sums instead of averaging, so every replica "
                "applies twice the true gradient (a classic bug when the loss is a per-rank mean). The "
                "verifier pinpoints the all-reduce of dw2 on rank 0.")
    p = Plan(name, desc, {"dp": dp})
    logical_mlp(p)
    for r in range(dp):
        s = f"@r{r}"
        for t, shp, role in [("x", [bs, D], "input"), ("w1", [H, D], "weight"), ("w2", [C, H], "weight"),
                             ("dloss", [], "gradient"), ("h", [bs, H], "activation"), ("a", [bs, H], "activation"),
                             ("logits", [bs, C], "activation"), ("loss", [], "loss"), ("dlogits", [bs, C], "gradient"),
                             ("da", [bs, H], "gradient"), ("dw2_local", [C, H], "gradient"), ("dh", [bs, H], "gradient"),
                             ("dw1_local", [H, D], "gradient"), ("dw2", [C, H], "gradient"), ("dw1", [H, D], "gradient"),
                             ("w1_new", [H, D], "weight"), ("w2_new", [C, H], "weight")]:
            p.pt(t + s, shp, role, r)
        p.pt("labels" + s, [bs], "input", r, dtype="int")
    for r in range(dp):
        s = f"@r{r}"
        p.pop("fc1" + s, "linear", ["x" + s, "w1" + s], ["h" + s], rank=r)
        p.pop("act" + s, "relu", ["h" + s], ["a" + s], rank=r)
        p.pop("fc2" + s, "linear", ["a" + s, "w2" + s], ["logits" + s], rank=r)
        p.pop("loss_fn" + s, "cross_entropy", ["logits" + s, "labels" + s], ["loss" + s], rank=r)
        p.pop("loss_fn_bw" + s, "cross_entropy_backward", ["logits" + s, "labels" + s, "dloss" + s], ["dlogits" + s], rank=r, phase="backward")
        p.pop("fc2_bw_data" + s, "matmul", ["dlogits" + s, "w2" + s], ["da" + s], rank=r, phase="backward")
        p.pop("fc2_bw_weight" + s, "matmul", ["dlogits" + s, "a" + s], ["dw2_local" + s], rank=r, attrs={"transpose_a": True}, phase="backward")
        p.pop("act_bw" + s, "relu_backward", ["h" + s, "da" + s], ["dh" + s], rank=r, phase="backward")
        p.pop("fc1_bw_weight" + s, "matmul", ["dh" + s, "x" + s], ["dw1_local" + s], rank=r, attrs={"transpose_a": True}, phase="backward")
    reduce = "sum" if missing_average else "mean"
    p.pop("dw2_allreduce", "all_reduce", [f"dw2_local@r{r}" for r in range(dp)], [f"dw2@r{r}" for r in range(dp)],
          group=list(range(dp)), attrs={"reduce": reduce})
    p.pop("dw1_allreduce", "all_reduce", [f"dw1_local@r{r}" for r in range(dp)], [f"dw1@r{r}" for r in range(dp)],
          group=list(range(dp)), attrs={"reduce": reduce})
    for r in range(dp):
        s = f"@r{r}"
        p.pop("sgd_w1" + s, "sgd", ["w1" + s, "dw1" + s], ["w1_new" + s], rank=r, attrs={"lr": LR}, phase="optimizer")
        p.pop("sgd_w2" + s, "sgd", ["w2" + s, "dw2" + s], ["w2_new" + s], rank=r, attrs={"lr": LR}, phase="optimizer")
    half = Fraction(1, dp)
    def batch_split(t, shape, coeff=1):
        out = []
        for r in range(dp):
            box = [(0, n) for n in shape]
            box[0] = (r * bs, (r + 1) * bs)
            out.append((box, [[(f"{t}@r{r}", coeff) if coeff != 1 else f"{t}@r{r}"]]))
        return out
    rep = lambda t, shape: [(full(shape), [[f"{t}@r{r}"] for r in range(dp)])]
    p.lineage("x", batch_split("x", [B, D]))
    p.lineage("labels", batch_split("labels", [B]))
    p.lineage("w1", rep("w1", [H, D]))
    p.lineage("w2", rep("w2", [C, H]))
    p.lineage("dloss", rep("dloss", []))
    p.lineage("h", batch_split("h", [B, H]))
    p.lineage("a", batch_split("a", [B, H]))
    p.lineage("logits", batch_split("logits", [B, C]))
    # The global mean loss is the average of the per-rank means.
    p.lineage("loss", [([], [[(f"loss@r{r}", half) for r in range(dp)]])])
    # Each rank's gradients are those of its own mean loss: dp times the logical gradient rows.
    p.lineage("dlogits", batch_split("dlogits", [B, C], half))
    p.lineage("da", batch_split("da", [B, H], half))
    p.lineage("dh", batch_split("dh", [B, H], half))
    # Before the all-reduce: the logical weight gradient is the mean of the local ones...
    p.lineage("dw2", [(full([C, H]), [[(f"dw2_local@r{r}", half) for r in range(dp)]])])
    p.lineage("dw1", [(full([H, D]), [[(f"dw1_local@r{r}", half) for r in range(dp)]])])
    # ...after it every replica holds it.
    p.lineage("dw2", rep("dw2", [C, H]))
    p.lineage("dw1", rep("dw1", [H, D]))
    p.lineage("w1_new", rep("w1_new", [H, D]))
    p.lineage("w2_new", rep("w2_new", [C, H]))
    if missing_average:
        p.expect("not_equivalent", kind="counterexample", parallel_op="dw2_allreduce", rank=0)
    else:
        p.expect("equivalent")
    return p


# ----- pipeline parallelism ------------------------------------------------------------------

def mlp_pp2(crossed=False):
    pp, nm = 2, 2
    mbs = B // nm
    name = "mlp-pp2-crossed-sendrecv" if crossed else "mlp-pp2"
    desc = ("Two-layer MLP training step under pipeline parallelism (PP=2) with 2 microbatches: rank 0 "
            "runs fc1 and the activation, rank 1 runs fc2 and the loss. Activations go forward and their "
            "gradients come back with send/recv, each microbatch's loss is scaled by 1/2 before backward "
            "(as Megatron does), and the weight gradients of the two microbatches are accumulated before "
            "the SGD step.")
    if crossed:
        desc = ("Buggy twin of mlp-pp2: the forward send/recv pairs between the two pipeline stages are "
                "crossed, so rank 1 runs microbatch 0's fc2 on microbatch 1's activations. The verifier "
                "finds a counterexample and explains it as a lane misalignment: the send/recv of microbatch 0 "
                "reads microbatch 1's activation.")
    p = Plan(name, desc, {"pp": pp}, microbatches=nm)
    logical_mlp(p)
    # Rank 0 (pp=0): fc1 + relu; rank 1 (pp=1): fc2 + loss.
    p.pt("w1@r0", [H, D], "weight", 0)
    p.pt("w2@r1", [C, H], "weight", 1)
    for m in range(nm):
        s0, s1 = f".mb{m}@r0", f".mb{m}@r1"
        p.pt("x" + s0, [mbs, D], "input", 0, m)
        p.pt("h" + s0, [mbs, H], "activation", 0, m)
        p.pt("a" + s0, [mbs, H], "activation", 0, m)
        p.pt("a" + s1, [mbs, H], "activation", 1, m)
        p.pt("labels" + s1, [mbs], "input", 1, m, dtype="int")
        p.pt("logits" + s1, [mbs, C], "activation", 1, m)
        p.pt("loss" + s1, [], "loss", 1, m)
        p.pt("dloss" + s1, [], "gradient", 1, m)
        p.pt("dloss_scaled" + s1, [], "gradient", 1, m)
        p.pt("dlogits" + s1, [mbs, C], "gradient", 1, m)
        p.pt("da" + s1, [mbs, H], "gradient", 1, m)
        p.pt("da" + s0, [mbs, H], "gradient", 0, m)
        p.pt("dw2" + s1, [C, H], "gradient", 1, m)
        p.pt("dh" + s0, [mbs, H], "gradient", 0, m)
        p.pt("dw1" + s0, [H, D], "gradient", 0, m)
    p.pt("dw1_acc@r0", [H, D], "gradient", 0)
    p.pt("dw2_acc@r1", [C, H], "gradient", 1)
    p.pt("w1_new@r0", [H, D], "weight", 0)
    p.pt("w2_new@r1", [C, H], "weight", 1)
    # Forward of both microbatches (GPipe order), then backward.
    for m in range(nm):
        s0, s1 = f".mb{m}@r0", f".mb{m}@r1"
        p.pop("fc1" + s0, "linear", ["x" + s0, "w1@r0"], ["h" + s0], rank=0, mb=m)
        p.pop("act" + s0, "relu", ["h" + s0], ["a" + s0], rank=0, mb=m)
    for m in range(nm):
        src = f"a.mb{(1 - m) if crossed else m}@r0"
        p.pop(f"send_a.mb{m}", "send_recv", [src], [f"a.mb{m}@r1"], group=[0, 1], mb=m)
    for m in range(nm):
        s1 = f".mb{m}@r1"
        p.pop("fc2" + s1, "linear", ["a" + s1, "w2@r1"], ["logits" + s1], rank=1, mb=m)
        p.pop("loss_fn" + s1, "cross_entropy", ["logits" + s1, "labels" + s1], ["loss" + s1], rank=1, mb=m)
    for m in range(nm):
        s0, s1 = f".mb{m}@r0", f".mb{m}@r1"
        p.pop("loss_scale_bw" + s1, "mul_scalar", ["dloss" + s1], ["dloss_scaled" + s1], rank=1, mb=m,
              attrs={"value": f"1/{nm}"}, phase="backward")
        p.pop("loss_fn_bw" + s1, "cross_entropy_backward", ["logits" + s1, "labels" + s1, "dloss_scaled" + s1],
              ["dlogits" + s1], rank=1, mb=m, phase="backward")
        p.pop("fc2_bw_data" + s1, "matmul", ["dlogits" + s1, "w2@r1"], ["da" + s1], rank=1, mb=m, phase="backward")
        p.pop("fc2_bw_weight" + s1, "matmul", ["dlogits" + s1, "a" + s1], ["dw2" + s1], rank=1, mb=m,
              attrs={"transpose_a": True}, phase="backward")
        p.pop(f"send_da.mb{m}", "send_recv", ["da" + s1], ["da" + s0], group=[1, 0], mb=m, phase="backward")
        p.pop("act_bw" + s0, "relu_backward", ["h" + s0, "da" + s0], ["dh" + s0], rank=0, mb=m, phase="backward")
        p.pop("fc1_bw_weight" + s0, "matmul", ["dh" + s0, "x" + s0], ["dw1" + s0], rank=0, mb=m,
              attrs={"transpose_a": True}, phase="backward")
    p.pop("accumulate_dw1@r0", "add", ["dw1.mb0@r0", "dw1.mb1@r0"], ["dw1_acc@r0"], rank=0, phase="backward")
    p.pop("accumulate_dw2@r1", "add", ["dw2.mb0@r1", "dw2.mb1@r1"], ["dw2_acc@r1"], rank=1, phase="backward")
    p.pop("sgd_w1@r0", "sgd", ["w1@r0", "dw1_acc@r0"], ["w1_new@r0"], rank=0, attrs={"lr": LR}, phase="optimizer")
    p.pop("sgd_w2@r1", "sgd", ["w2@r1", "dw2_acc@r1"], ["w2_new@r1"], rank=1, attrs={"lr": LR}, phase="optimizer")

    def mb_split(t, shape, ranks, coeff=1):
        out = []
        for m in range(nm):
            box = [(0, n) for n in shape]
            box[0] = (m * mbs, (m + 1) * mbs)
            copies = [[(f"{t}.mb{m}@r{r}", coeff) if coeff != 1 else f"{t}.mb{m}@r{r}"] for r in ranks]
            out.append((box, copies))
        return out
    p.lineage("x", mb_split("x", [B, D], [0]))
    p.lineage("labels", mb_split("labels", [B], [1]))
    p.lineage("w1", [(full([H, D]), [["w1@r0"]])])
    p.lineage("w2", [(full([C, H]), [["w2@r1"]])])
    p.lineage("dloss", [([], [[f"dloss.mb{m}@r1"] for m in range(nm)])])
    p.lineage("h", mb_split("h", [B, H], [0]))
    # Each microbatch's activations are held on rank 0 and, after the send, on rank 1.
    p.lineage("a", mb_split("a", [B, H], [0, 1]))
    p.lineage("logits", mb_split("logits", [B, C], [1]))
    p.lineage("loss", [([], [[(f"loss.mb{m}@r1", Fraction(1, nm)) for m in range(nm)]])])
    p.lineage("dlogits", mb_split("dlogits", [B, C], [1]))
    p.lineage("da", mb_split("da", [B, H], [1, 0]))
    p.lineage("dh", mb_split("dh", [B, H], [0]))
    # Weight gradients: the sum of the microbatches' contributions, then the accumulated tensor.
    p.lineage("dw2", [(full([C, H]), [[f"dw2.mb{m}@r1" for m in range(nm)]])])
    p.lineage("dw1", [(full([H, D]), [[f"dw1.mb{m}@r0" for m in range(nm)]])])
    p.lineage("dw2", [(full([C, H]), [["dw2_acc@r1"]])])
    p.lineage("dw1", [(full([H, D]), [["dw1_acc@r0"]])])
    p.lineage("w1_new", [(full([H, D]), [["w1_new@r0"]])])
    p.lineage("w2_new", [(full([C, H]), [["w2_new@r1"]])])
    if crossed:
        p.expect("not_equivalent", kind="lane_misalignment", parallel_op="send_a.mb0", rank=1)
    else:
        p.expect("equivalent")
    return p


def main():
    os.makedirs(OUT, exist_ok=True)
    examples = [
        (mlp_tp2(), "mlp-tp2.json"), (mlp_tp2(True), "mlp-tp2-missing-allreduce.json"),
        (mlp_dp2(), "mlp-dp2.json"), (mlp_dp2(True), "mlp-dp2-missing-average.json"),
        (mlp_pp2(), "mlp-pp2.json"), (mlp_pp2(True), "mlp-pp2-crossed-sendrecv.json"),
    ]
    for plan, fn in examples:
        plan.write(fn)
        print("wrote", fn)


if __name__ == "__main__":
    main()
