// trainverify inspect: what a plan file holds (counts, the parallel configuration, stages), or
// what the safe pickle reader finds in a pickle (an nnScaler plan's per-device programs), or a
// captured PyTorch graph (printed `.py` or pickled `.gpickle`): its rank, inputs, outputs, operators
// and framework source lines.
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
#include "torch/torch_graph.hpp"
#include "verify/symmetry.hpp"

namespace tv::cli {

namespace {

/// Whether the file starts like a printed PyTorch graph.
bool isTorchGraphText(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::string head(1 << 16, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
    return tv::torch::looksLikeFxText(head);
}

/// A captured PyTorch graph, either form.
int inspectTorchGraph(const std::string& path, bool asJson) {
    tv::torch::TorchGraph g;
    try {
        g = tv::torch::readTorchGraphFile(path);
    } catch (const tv::torch::TorchGraphError& e) {
        std::fprintf(stderr, "trainverify: %s\n", e.what());
        return 3;
    }
    const auto names = g.names();
    std::size_t calls = 0, items = 0, constants = 0, located = 0;
    for (const auto& n : g.nodes) {
        calls += n.kind == tv::torch::Node::Kind::Call;
        items += n.kind == tv::torch::Node::Kind::GetItem;
        constants += n.kind == tv::torch::Node::Kind::Constant;
        located += n.kind == tv::torch::Node::Kind::Call && n.source >= 0;
    }
    const auto histogram = g.histogram();
    const int fileRank = tv::torch::rankFromFileName(path);
    if (asJson) {
        nlohmann::json inputs = nlohmann::json::array(), outputs = nlohmann::json::array(), ops = nlohmann::json::object();
        for (int i : g.inputs) {
            const auto& n = g.nodes[static_cast<std::size_t>(i)];
            inputs.push_back({{"name", n.name}, {"type", n.type ? n.type->toString() : std::string()}});
        }
        for (const auto& v : g.outputs) outputs.push_back(v.isNode() ? nlohmann::json(names[static_cast<std::size_t>(v.node)]) : nlohmann::json());
        for (const auto& [t, n] : histogram) ops[t] = n;
        nlohmann::json j = {{"torch_graph",
                             {{"file", tv::pickle::validUtf8(path)}, {"rank", g.rank}, {"rank_in_file_name", fileRank}, {"phase", g.phase}, {"gid", g.gid},
                              {"nodes", g.nodes.size()}, {"calls", calls}, {"elements", items}, {"constants", constants},
                              {"calls_with_source", located}, {"sources", g.sources.size()}, {"inputs", inputs}, {"outputs", outputs}, {"operators", ops}}}};
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::cout << "torch graph   " << path << "\n";
    std::cout << "rank          " << (g.rank >= 0 ? std::to_string(g.rank) : std::string("not said"));
    if (fileRank >= 0 && fileRank != g.rank) std::cout << " (the file name says " << fileRank << ")";
    std::cout << ", phase " << (g.phase.empty() ? std::string("not said") : g.phase) << ", graph " << g.gid << "\n";
    std::cout << "nodes         " << g.nodes.size() << ": " << g.inputs.size() << " inputs, " << calls << " operator calls, " << items
              << " tuple elements, " << constants << " tensor constants\n";
    std::cout << "outputs       " << g.outputs.size() << "\n";
    std::cout << "source lines  " << g.sources.size() << " distinct; " << located << " of " << calls << " calls have one\n";
    std::cout << "inputs       ";
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
        const auto& n = g.nodes[static_cast<std::size_t>(g.inputs[k])];
        if (k == 12 && g.inputs.size() > 14) {
            std::cout << " ... (" << g.inputs.size() - 12 << " more)";
            break;
        }
        std::cout << " " << n.name << " " << (n.type ? n.type->toString() : std::string("?")) << (k + 1 < g.inputs.size() ? "," : "");
    }
    std::cout << "\noperators     " << histogram.size() << " distinct:\n";
    for (const auto& [t, n] : histogram) std::printf("  %6d  %s\n", n, t.c_str());
    return 0;
}

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
    if (doc.className(doc.root) == "torchgraph.pgraph.pickleable.PickleableGraph") return inspectTorchGraph(path, asJson);
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
    if (isTorchGraphText(path)) return inspectTorchGraph(path, asJson);
    const auto opened = tv::session::openPlanFile(path, tv::ReadOptions{true});
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
                       {"listed_dp", p.replication.listedDp},
                       {"members_stored_once", std::max(p.membersStoredOnce, p.replication.members)},
                       {"member_axis", p.replication.members > 1 && p.replication.memberAxis == Axis::CP ? "cp" : "dp"},
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
        std::cout << "stored        " << tv::storedOnce(p.replication, p.membersStoredOnce) << ": " << p.parallel.ops.size() << " ops, " << p.parallel.tensors.size()
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
