// Symbolic evaluation of one stage: fresh unknowns for the logical inputs, parallel inputs
// defined from them through the lineage, then every op of both sides run on Z3 terms.

#include "verify/stage_checker.hpp"

namespace tv::check_detail {

SymValue StageChecker::freshTensor(const std::string& prefix, const Shape& shape, DType dtype) {
    SymValue v;
    v.shape = shape;
    auto n = numel(shape);
    // Index tensors (token ids, labels) are unknowns like any other: a proof covers every
    // value of the index data (lookups compare them with class numbers; registry.cpp).
    v.isInt = dtype == DType::Int;
    if (v.isInt) {
        v.v.reserve(static_cast<std::size_t>(n));
        for (std::int64_t k = 0; k < n; ++k) {
            v.v.push_back(ctx_.real_const((prefix + indexString(unravel(k, shape))).c_str()));
            idVars_.emplace(v.v.back().id(), IdVar{v.v.back(), 0, {}});
        }
        return v;
    }
    v.v.reserve(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k)
        v.v.push_back(ctx_.real_const((prefix + indexString(unravel(k, shape))).c_str()));
    return v;
}

bool StageChecker::evaluate() {
    // Inputs: logical tensors of the assumed records are free; parallel tensors are defined
    // from them through the lineage, so every assumption holds by construction.
    // An input record's logical tensor that a logical op of the stage computes (from the other
    // inputs) is computed first; the others are free.
    std::unordered_set<TensorId> computedHere;
    for (auto op : stage_.logicalOps)
        for (auto t : L_.outputs(op)) computedHere.insert(t);
    for (auto r : stage_.inputs) {
        auto lt = plan_.lineage[r].logical;
        if (!lVal_.count(lt) && !computedHere.count(lt))
            lVal_.emplace(lt, freshTensor(plan_.tensorName(L_, lt), lShape_[lt], L_.tensors[lt].dtype));
    }
    assignIndexDomains();
    if (!runOps(L_, stage_.logicalOps, lShape_, lVal_)) return false;
    for (auto r : stage_.inputs) {
        const auto& rec = plan_.lineage[r];
        const auto& ts = lVal_.at(rec.logical);
        for (const auto& s : rec.slices) {
            auto offs = boxOffsets(ts.shape, reducedBox(s.box, rec.logical));
            for (const auto& c : s.copies) {
                std::vector<SymValue> parts;
                for (std::size_t k = 0; k < c.size(); ++k) {
                    auto pt = c[k].tensor;
                    if (pVal_.count(pt)) continue;
                    SymValue v;
                    if (k + 1 < c.size()) {
                        v = freshTensor(plan_.tensorName(P_, pt), pShape_[pt], P_.tensors[pt].dtype);
                    } else {
                        v.shape = pShape_[pt];
                        v.isInt = ts.isInt;
                        for (std::size_t e = 0; e < offs.size(); ++e) {
                            std::vector<z3::expr> others;
                            for (std::size_t j = 0; j + 1 < c.size(); ++j)
                                others.push_back(alg_.mul(alg_.num(c[j].coeff), pVal_.at(c[j].tensor).v[e]));
                            auto rest = others.empty() ? ts.v[offs[e]] : alg_.sub(ts.v[offs[e]], alg_.sum(others));
                            v.v.push_back(alg_.div(rest, alg_.num(c[k].coeff)));
                        }
                    }
                    pVal_.emplace(pt, std::move(v));
                }
            }
        }
    }
    return runOps(P_, stage_.parallelOps, pShape_, pVal_);
}

bool StageChecker::runOps(const Graph& g, const std::vector<OpId>& ops, std::unordered_map<TensorId, Shape>& shapes,
            std::unordered_map<TensorId, SymValue>& vals) {
    const auto& reg = OpRegistry::instance();
    for (auto op : ops) {
        const auto& spec = reg.spec(g.ops[op].kind);
        std::vector<const SymValue*> ins;
        std::vector<Shape> origIn, origOut;
        for (auto t : g.inputs(op)) {
            auto it = vals.find(t);
            if (it == vals.end()) {
                fail(FailureKind::DataflowBroken, "op \"" + plan_.opName(g, op) + "\" reads \"" + plan_.tensorName(g, t) +
                                                      "\", which this stage neither assumes nor computes");
                return false;
            }
            ins.push_back(&it->second);
            origIn.push_back(plan_.shape(g, t));
        }
        std::vector<SymValue> outs;
        for (auto t : g.outputs(op)) {
            SymValue v;
            v.shape = shapes.at(t);
            outs.push_back(std::move(v));
            origOut.push_back(plan_.shape(g, t));
        }
        if (!spec.evalSym) {
            fail(FailureKind::UnsupportedOperator, "operator " + std::string(spec.name) + " has no symbolic semantics");
            return false;
        }
        EvalContext ec{plan_.opAttrs(g, op), origIn, origOut};
        spec.evalSym(alg_, ins, outs, ec);
        auto outIds = g.outputs(op);
        for (std::size_t k = 0; k < outs.size(); ++k) {
            outs[k].isInt = g.tensors[outIds[k]].dtype == DType::Int;
            vals.insert_or_assign(outIds[k], std::move(outs[k]));
        }
    }
    return true;
}

void StageChecker::fail(FailureKind kind, const std::string& msg) {
    Failure f;
    f.kind = kind;
    f.stage = stage_.id;
    f.tensor = plan_.tensorName(L_, plan_.lineage[stage_.output].logical);
    f.message = msg;
    result_.status = isInconclusive(kind) ? StageStatus::Inconclusive : StageStatus::Failed;
    result_.failure = f;
}

}  // namespace tv::check_detail
