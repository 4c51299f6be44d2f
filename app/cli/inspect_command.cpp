// trainverify inspect: what a plan file holds (counts, the parallel configuration, stages), or
// what the safe pickle reader finds in a pickle (an nnScaler plan's per-device programs).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "nnscaler/nnscaler_plan.hpp"
#include "pickle/pickle.hpp"
#include "session/session.hpp"
#include "verify/symmetry.hpp"

namespace tv::cli {

namespace {

/// A pickled nnScaler plan: what the safe reader finds in it (protocol, objects, classes).
int inspectPickle(const std::string& path, bool asJson) {
    tv::pickle::Document doc;
    try {
        doc = tv::pickle::readFile(path);
    } catch (const tv::pickle::PickleError& e) {
        std::fprintf(stderr, "trainverify: %s: not a readable pickle: %s\n", path.c_str(), e.what());
        return 3;
    }
    auto counts = doc.classCounts();
    std::vector<std::pair<std::size_t, std::string>> byCount;
    for (const auto& [name, n] : counts) byCount.emplace_back(n, name);
    std::stable_sort(byCount.begin(), byCount.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    // An nnScaler plan: its per-device programs.
    std::optional<tv::nnscaler::Plan> plan;
    if (doc.className(doc.root) == "nnscaler.codegen.module.module.ModuleCodeGen") {
        try {
            plan = tv::nnscaler::readPlan(doc);
        } catch (const tv::nnscaler::NnScalerError& e) {
            std::fprintf(stderr, "trainverify: %s: not a readable nnScaler plan: %s\n", path.c_str(), e.what());
            return 3;
        }
    }
    std::map<std::string, std::size_t> operators, primitives;
    nlohmann::json devices = nlohmann::json::array();
    if (plan)
        for (const auto& [dev, cells] : plan->programs) {
            std::map<std::string, std::size_t> kinds;
            std::size_t prims = 0;
            for (const auto& c : cells) {
                ++kinds[tv::nnscaler::toString(c.kind)];
                if (c.kind == tv::nnscaler::CellKind::Forward) ++operators[c.signature];
                for (const auto& p : c.primitives) {
                    ++primitives[p.kind];
                    ++prims;
                }
            }
            nlohmann::json d = {{"device", dev}, {"primitives", prims}};
            for (const auto& [k, n] : kinds) d[k] = n;
            devices.push_back(std::move(d));
        }
    if (asJson) {
        nlohmann::json classes = nlohmann::json::object();
        for (const auto& [name, n] : counts) classes[tv::pickle::validUtf8(name)] = n;
        nlohmann::json j = {{"pickle",
                             {{"protocol", doc.protocol}, {"objects", doc.nodes.size()}, {"root", tv::pickle::validUtf8(doc.className(doc.root))}, {"classes", classes}}}};
        if (plan)
            j["nnscaler"] = {{"devices", plan->devices.size()}, {"runtime_ranks", plan->runtimeRanks}, {"data_parallel", plan->dataParallel()},
                             {"microbatches", plan->microbatches}, {"sub_tensors", plan->tensors.size()}, {"programs", devices},
                             {"operators", operators}, {"primitives", primitives}};
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::cout << "pickle        " << path << " (protocol " << doc.protocol << ", " << doc.nodes.size() << " objects)\n";
    std::cout << "root          " << (doc.className(doc.root).empty() ? doc.describe(doc.root) : doc.className(doc.root)) << "\n";
    if (plan) {
        std::cout << "nnScaler plan " << plan->devices.size() << " devices, " << plan->runtimeRanks << " runtime ranks (dp " << plan->dataParallel()
                  << "), " << plan->microbatches << " microbatch(es), " << plan->tensors.size() << " sub-tensors\n";
        for (const auto& d : devices) {
            std::cout << "  device " << d["device"].get<int>() << ":";
            const char* sep = " ";
            for (auto [k, label] : {std::pair{"data loader", "data loaders"}, {"forward", "forward ops"}, {"backward", "backward ops"},
                                    {"adapter", "adapters"}, {"reducer", "reducers"}})
                if (d.contains(k)) {
                    std::cout << sep << d[k].get<std::size_t>() << " " << label;
                    sep = ", ";
                }
            std::cout << " (" << d["primitives"].get<std::size_t>() << " primitives)\n";
        }
        auto line = [](const char* label, const std::map<std::string, std::size_t>& m) {
            std::cout << label;
            bool first = true;
            for (const auto& [k, n] : m) {
                std::cout << (first ? "" : ", ") << k << " " << n;
                first = false;
            }
            std::cout << "\n";
        };
        line("operators     ", operators);
        line("primitives    ", primitives);
        if (plan->runtimeRanks <= 1 && plan->microbatches <= 1)
            std::cout << "verify        trainverify verify --logical " << path << " --parallel PARALLEL.pkl   (this is a single-device plan)\n";
        else
            std::cout << "verify        trainverify verify --logical LOGICAL.pkl --parallel " << path << "\n";
        return 0;
    }
    std::cout << "classes       " << counts.size() << " distinct; the most frequent:\n";
    for (std::size_t k = 0; k < byCount.size() && k < 25; ++k) std::printf("  %8zu  %s\n", byCount[k].first, byCount[k].second.c_str());
    return 0;
}

}  // namespace

int inspectCommand(const Args& args) {
    std::string path;
    bool asJson = false;
    Arguments parser("inspect");
    parser.flag({"--json"}, &asJson).positional(&path, "inspect takes one plan file");
    if (auto problem = parser.parse(args); !problem.empty()) return usageError(problem);
    if (path.empty()) return usageError("inspect needs a plan file");
    if (isPickleFile(path)) return inspectPickle(path, asJson);
    const auto opened = tv::session::openPlanFile(path);
    if (!opened.ok()) {
        std::cout << tv::reportToText(opened.refusal);
        return 3;
    }
    // Counts are of the plan written out (counted, not written); a plan stored with replicas also
    // reports what it stores. Stages are one per lineage record either way.
    const auto& p = *opened.opened->plan;
    const bool compact = p.replication.active();
    const auto out = tv::writtenOutCounts(p);
    auto sp = tv::cutStages(p);
    std::size_t glue = 0;
    for (const auto& s : sp.stages) glue += s.glue() ? 1 : 0;
    nlohmann::json mesh = nlohmann::json::object();
    for (auto a : tv::kAxes) mesh[std::string(tv::toString(a))] = p.mesh.at(a);
    nlohmann::json j = {
        {"name", p.name},
        {"description", p.description},
        {"logical", {{"ops", p.logical.ops.size()}, {"tensors", p.logical.tensors.size()}}},
        {"parallel", {{"ops", out.ops}, {"tensors", out.tensors}, {"op_kinds", out.opKinds}}},
        {"ranks", p.ranks.size()},
        {"mesh", mesh},
        {"microbatches", p.microbatches},
        {"lineage_records", p.lineage.size()},
        {"initial_records", sp.initialRecords.size()},
        {"stages", {{"total", sp.stages.size()}, {"op", sp.stages.size() - glue}, {"glue", glue}}},
        {"structural_failures", sp.structural.size()},
    };
    if (compact)
        j["stored"] = {{"replicas", p.replication.degree},
                       {"microbatches", p.replication.microbatches},
                       {"parallel_ops", p.parallel.ops.size()},
                       {"parallel_tensors", p.parallel.tensors.size()}};
    if (asJson) {
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::cout << "plan          " << (p.name.empty() ? path : p.name) << "\n";
    if (!p.description.empty()) std::cout << "description   " << p.description << "\n";
    std::cout << "logical       " << p.logical.ops.size() << " ops, " << p.logical.tensors.size() << " tensors\n";
    std::cout << "parallel      " << out.ops << " ops, " << out.tensors << " tensors\n";
    if (compact)
        std::cout << "stored        " << tv::storedOnce(p.replication) << ": " << p.parallel.ops.size() << " ops, " << p.parallel.tensors.size()
                  << " tensors\n";
    std::cout << "ranks         " << p.ranks.size() << " (";
    bool first = true;
    for (auto a : tv::kAxes)
        if (p.mesh.at(a) > 1 || a == tv::Axis::DP || a == tv::Axis::TP || a == tv::Axis::PP) {
            std::cout << (first ? "" : " ") << tv::toString(a) << "=" << p.mesh.at(a);
            first = false;
        }
    std::cout << "), " << p.microbatches << " microbatch(es)\n";
    std::cout << "lineage       " << p.lineage.size() << " records, " << sp.initialRecords.size() << " initial\n";
    std::cout << "stages        " << sp.stages.size() << " (" << sp.stages.size() - glue << " op, " << glue << " glue)\n";
    std::cout << "parallel ops  ";
    first = true;
    for (const auto& [k, n] : out.opKinds) {
        std::cout << (first ? "" : ", ") << k << " " << n;
        first = false;
    }
    std::cout << "\n";
    for (const auto& w : sp.warnings) std::cout << "warning: " << w << "\n";
    return 0;
}

}  // namespace tv::cli
