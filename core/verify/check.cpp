// Checking one stage: the entry point (a fresh Z3 context, interruption, out-of-memory as a
// verdict), the stage result as data, and the checker's run; its parts are in the check_*.cpp
// files (stage_checker.hpp lists them).
#include "verify/check.hpp"

#include "verify/stage_checker.hpp"

namespace tv {

std::string_view toString(StageStatus s) {
    switch (s) {
        case StageStatus::Queued: return "queued";
        case StageStatus::Running: return "running";
        case StageStatus::Equivalent: return "equivalent";
        case StageStatus::Failed: return "failed";
        case StageStatus::Inconclusive: return "inconclusive";
        case StageStatus::Skipped: return "skipped";
    }
    return "?";
}

namespace check_detail {

bool appliesUninterpreted(const SymValue& v, std::size_t limit, std::unordered_set<unsigned>& seen) {
    std::vector<z3::expr> work;
    for (std::size_t i = 0; i < v.v.size() && i < limit; ++i) work.push_back(v.v[i]);
    while (!work.empty()) {
        const z3::expr e = work.back();
        work.pop_back();
        if (!e.is_app() || !seen.insert(e.id()).second) continue;
        const auto decl = e.decl();
        if (decl.decl_kind() == Z3_OP_UNINTERPRETED && decl.arity() > 0) return true;
        for (unsigned a = 0; a < e.num_args(); ++a) work.push_back(e.arg(a));
    }
    return false;
}

std::string indexString(const std::vector<std::int64_t>& idx) {
    std::string s = "[";
    for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
    return s + "]";
}

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
    std::vector<std::int64_t> idx(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    return idx;
}

std::vector<std::int64_t> boxOffsets(const Shape& shape, const Box& box) { return box.offsetsIn(shape); }

StageResult StageChecker::run() {
    result_.stage = stage_.id;
    collectTensors();
    auto t0 = Clock::now();
    if (!reduceShapes()) {
        result_.reduceSeconds = since(t0);
        return result_;
    }
    result_.reduceSeconds = since(t0);
    if (opts_.maxElements > 0 && result_.reducedElements > opts_.maxElements) {
        tooLarge();
        return result_;
    }
    auto t1 = Clock::now();
    if (!evaluate()) {
        result_.encodeSeconds = since(t1);
        return result_;
    }
    result_.encodeSeconds = since(t1);
    auto t2 = Clock::now();
    solve();
    result_.solveSeconds = since(t2);
    return result_;
}

void StageChecker::collectTensors() {
    std::unordered_set<TensorId> ls, ps;
    auto addL = [&](TensorId t) { if (ls.insert(t).second) lTensors_.push_back(t); };
    auto addP = [&](TensorId t) { if (ps.insert(t).second) pTensors_.push_back(t); };
    records_ = stage_.inputs;
    records_.push_back(stage_.output);
    for (auto r : records_) {
        const auto& rec = plan_.lineage[r];
        addL(rec.logical);
        for (const auto& s : rec.slices)
            for (const auto& c : s.copies)
                for (const auto& t : c) addP(t.tensor);
    }
    for (auto op : stage_.logicalOps) {
        for (auto t : L_.inputs(op)) addL(t);
        for (auto t : L_.outputs(op)) addL(t);
    }
    for (auto op : stage_.parallelOps) {
        for (auto t : P_.inputs(op)) addP(t);
        for (auto t : P_.outputs(op)) addP(t);
    }
}

}  // namespace check_detail

using check_detail::StageChecker;


nlohmann::json stageResultToJson(const StageResult& r) {
    nlohmann::json j = {{"stage", r.stage},
                        {"status", toString(r.status)},
                        {"tiers", {r.tiers.simplify, r.tiers.expLog, r.tiers.solveEqs, r.tiers.solver}},
                        {"seconds", {r.reduceSeconds, r.encodeSeconds, r.solveSeconds}},
                        {"elements", {r.reducedElements, r.fullElements}},
                        {"note", r.note},
                        {"same_as", r.sameAs},
                        {"cached", r.cached}};
    if (r.failure) j["failure"] = r.failure->toJson();
    return j;
}

StageResult stageResultFromJson(const nlohmann::json& j) {
    StageResult r;
    r.stage = j.at("stage").get<std::uint32_t>();
    const auto status = j.at("status").get<std::string>();
    bool known = false;
    for (auto s : {StageStatus::Queued, StageStatus::Running, StageStatus::Equivalent, StageStatus::Failed, StageStatus::Inconclusive,
                   StageStatus::Skipped})
        if (toString(s) == status) {
            r.status = s;
            known = true;
        }
    if (!known) throw std::invalid_argument("unknown stage status \"" + status + "\"");
    const auto& t = j.at("tiers");
    r.tiers = {t.at(0).get<std::uint32_t>(), t.at(1).get<std::uint32_t>(), t.at(2).get<std::uint32_t>(), t.at(3).get<std::uint32_t>()};
    const auto& sec = j.at("seconds");
    r.reduceSeconds = sec.at(0).get<double>();
    r.encodeSeconds = sec.at(1).get<double>();
    r.solveSeconds = sec.at(2).get<double>();
    r.reducedElements = j.at("elements").at(0).get<std::uint64_t>();
    r.fullElements = j.at("elements").at(1).get<std::uint64_t>();
    r.note = j.at("note").get<std::string>();
    r.sameAs = j.at("same_as").get<std::uint32_t>();
    r.cached = j.at("cached").get<bool>();
    if (auto it = j.find("failure"); it != j.end()) r.failure = Failure::fromJson(*it);
    return r;
}

namespace {
StageResult inconclusiveResult(const Stage& stage, std::string message) {
    StageResult r;
    r.stage = stage.id;
    r.status = StageStatus::Inconclusive;
    Failure f;
    f.kind = FailureKind::Inconclusive;
    f.stage = stage.id;
    f.message = std::move(message);
    r.failure = f;
    return r;
}
}  // namespace

StageResult checkStage(const Plan& plan, const Stage& stage, const CheckOptions& opts, const InterruptSlot* slot) {
    StageResult r;
    r.stage = stage.id;
    try {
        // Made through the C API: under a low memory limit Z3_mk_context_rc returns null, and
        // z3::context would use it (a crash, not a verdict).
        struct OwnedContext {
            Z3_context raw;
            ~OwnedContext() { if (raw) Z3_del_context(raw); }
        } owned{[] {
            Z3_config cfg = Z3_mk_config();
            if (!cfg) return Z3_context{nullptr};
            Z3_context c = Z3_mk_context_rc(cfg);
            Z3_del_config(cfg);
            return c;
        }()};
        if (!owned.raw) return inconclusiveResult(stage, "out of memory: the solver could not start (no Z3 context)");
        z3::scoped_context scoped(owned.raw);
        z3::context& ctx = scoped();
        if (slot && slot->enter) slot->enter(&ctx);
        struct Leave {
            const InterruptSlot* s;
            ~Leave() { if (s && s->leave) s->leave(); }
        } leave{slot};
        StageChecker checker(plan, stage, opts, ctx);
        r = checker.run();
    } catch (const z3::exception& e) {
        r = inconclusiveResult(stage, std::string("the solver stopped: ") + e.msg());
    } catch (const std::bad_alloc&) {
        r = inconclusiveResult(stage, "out of memory while checking the stage");
    } catch (const std::exception& e) {
        // A thread that cannot start under a memory limit (EAGAIN) is that limit too.
        r = inconclusiveResult(stage, isOutOfMemory(e) ? std::string("out of memory while checking the stage")
                                                       : std::string("internal error while checking the stage: ") + e.what());
    } catch (...) {
        // Z3's own out_of_memory_error is not a std::exception; under a memory limit it can
        // escape a solver call.
        r = inconclusiveResult(stage, "the solver stopped with an error of its own (out of memory, most likely)");
    }
    return r;
}

}  // namespace tv
