#include "layout/layout_process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <sstream>

#include <nlohmann/json.hpp>

#include "layout/layered_layout.hpp"
#include "process/helper_process.hpp"

namespace tv {

namespace {

using nlohmann::json;

// Exit status of a layout process that runs out of memory.
constexpr int kOutOfMemory = 10;

json points(const std::vector<Point>& ps) {
    std::vector<double> flat;
    flat.reserve(ps.size() * 2);
    for (const auto& p : ps) {
        flat.push_back(p.x);
        flat.push_back(p.y);
    }
    return flat;
}

std::vector<Point> pointsFrom(const json& j) {
    const auto flat = j.get<std::vector<double>>();
    if (flat.size() % 2 != 0) throw std::runtime_error("an odd number of coordinates");
    std::vector<Point> ps(flat.size() / 2);
    for (std::size_t i = 0; i < ps.size(); ++i) ps[i] = {flat[2 * i], flat[2 * i + 1]};
    return ps;
}

json rect(const Rect& r) { return json::array({r.x, r.y, r.width, r.height}); }

Rect rectFrom(const json& j) {
    const auto v = j.get<std::vector<double>>();
    if (v.size() != 4) throw std::runtime_error("a rectangle of " + std::to_string(v.size()) + " numbers");
    return {v[0], v[1], v[2], v[3]};
}

std::string seconds(double s) {
    std::ostringstream os;
    os.precision(3);
    os << s;
    return os.str();
}

LayoutResult failed(std::string error) {
    LayoutResult r;
    r.error = std::move(error);
    return r;
}

}  // namespace

std::string layoutRequestBytes(const LayoutRequest& q) {
    std::vector<double> sizes;
    std::vector<int> clusterOf, edges;
    std::vector<bool> constraint;
    sizes.reserve(q.nodes.size() * 2);
    for (const auto& n : q.nodes) {
        sizes.push_back(n.width);
        sizes.push_back(n.height);
        clusterOf.push_back(n.cluster);
    }
    for (const auto& e : q.edges) {
        edges.push_back(e.from);
        edges.push_back(e.to);
        constraint.push_back(e.constraint);
    }
    json clusters = json::array();
    for (const auto& c : q.clusters) clusters.push_back(json::array({c.label, c.parent}));
    const json j = {{"sizes", sizes},       {"cluster_of", clusterOf},         {"edges", edges},
                    {"constraint", constraint}, {"clusters", clusters},        {"lr", q.leftToRight},
                    {"nodesep", q.nodeSeparation}, {"ranksep", q.rankSeparation}, {"effort", q.crossingEffort}};
    const auto bytes = json::to_cbor(j);
    return std::string(bytes.begin(), bytes.end());
}

LayoutRequest layoutRequestFromBytes(const std::string& bytes) {
    const json j = json::from_cbor(bytes);
    LayoutRequest q;
    const auto sizes = j.at("sizes").get<std::vector<double>>();
    const auto clusterOf = j.at("cluster_of").get<std::vector<int>>();
    const auto edges = j.at("edges").get<std::vector<int>>();
    const auto constraint = j.at("constraint").get<std::vector<bool>>();
    if (sizes.size() != clusterOf.size() * 2 || edges.size() != constraint.size() * 2) throw std::runtime_error("inconsistent request");
    for (std::size_t i = 0; i < clusterOf.size(); ++i) q.nodes.push_back({sizes[2 * i], sizes[2 * i + 1], clusterOf[i]});
    for (std::size_t i = 0; i < constraint.size(); ++i) q.edges.push_back({edges[2 * i], edges[2 * i + 1], constraint[i]});
    for (const auto& c : j.at("clusters")) q.clusters.push_back({c.at(0).get<std::string>(), c.at(1).get<int>()});
    q.leftToRight = j.at("lr").get<bool>();
    q.nodeSeparation = j.at("nodesep").get<double>();
    q.rankSeparation = j.at("ranksep").get<double>();
    q.crossingEffort = j.at("effort").get<double>();
    return q;
}

std::string layoutResultBytes(const LayoutResult& r) {
    json paths = json::array();
    for (const auto& p : r.edgePaths) paths.push_back(points(p));
    json boxes = json::array();
    for (const auto& b : r.clusterBoxes) boxes.push_back(rect(b));
    const json j = {{"centers", points(r.nodeCenters)}, {"paths", paths}, {"tips", points(r.edgeTips)},
                    {"boxes", boxes},                   {"bounds", rect(r.bounds)}, {"error", r.error}, {"fallback", r.fallback}};
    const auto bytes = json::to_cbor(j);
    return std::string(bytes.begin(), bytes.end());
}

LayoutResult layoutResultFromBytes(const std::string& bytes) {
    const json j = json::from_cbor(bytes);
    LayoutResult r;
    r.nodeCenters = pointsFrom(j.at("centers"));
    for (const auto& p : j.at("paths")) r.edgePaths.push_back(pointsFrom(p));
    r.edgeTips = pointsFrom(j.at("tips"));
    for (const auto& b : j.at("boxes")) r.clusterBoxes.push_back(rectFrom(b));
    r.bounds = rectFrom(j.at("bounds"));
    r.error = j.at("error").get<std::string>();
    if (auto it = j.find("fallback"); it != j.end()) r.fallback = it->get<std::string>();
    return r;
}

LayoutSession::LayoutSession(LayoutControl control) : control_(std::move(control)) {}

LayoutSession::~LayoutSession() = default;

LayoutResult LayoutSession::layout(const LayoutRequest& request) {
    const std::string size = std::to_string(request.nodes.size()) + " nodes and " + std::to_string(request.edges.size()) + " edges";
    auto cancelled = [&] {
        auto r = failed("the layout was cancelled (dot on " + size + ")");
        r.cancelled = true;
        return r;
    };
    auto overBudget = [&] {
        auto r = failed("the layout ran past its budget" +
                        (control_.budgetSeconds > 0 ? " of " + seconds(control_.budgetSeconds) + " s" : std::string()) + " (dot on " + size +
                        ") and was stopped: collapse ranks or layer groups, or expand fewer at a time");
        r.overBudget = true;
        return r;
    };
    // What dot could not draw, the layered layout draws (unless the control wants dot or nothing).
    auto layered = [&](const LayoutResult& why) {
        if (!control_.fallback) return why;
        auto r = layoutLayered(request);
        if (r.error.empty()) r.fallback = why.error;
        return r;
    };
    const std::atomic<bool> never{false};
    const std::atomic<bool>& stop = control_.stop ? *control_.stop : never;
    if (stop.load()) return cancelled();
    if (LayoutControl::Clock::now() >= control_.deadline) return layered(overBudget());
    // Refused before any process starts (the same bound, the same message).
    if (request.nodes.size() > kMaxLayoutNodes || request.edges.size() > kMaxLayoutEdges) {
        if (!control_.fallback) return layoutGraph(request);
        return layered(failed("its " + size + " are more than the " + std::to_string(kMaxLayoutNodes) + " nodes and " +
                              std::to_string(kMaxLayoutEdges) + " edges dot is given"));
    }
    if (control_.onRequest) control_.onRequest(requests_, request.nodes.size(), request.edges.size());
    ++requests_;
    if (control_.program.empty()) {
        auto r = layoutGraph(request);
        return r.error.empty() ? r : layered(r);
    }
    // Dot's own slice of the budget: past it, the layered layout draws this request.
    auto dotDeadline = control_.deadline;
    if (control_.dotSeconds > 0)
        dotDeadline = std::min(dotDeadline, LayoutControl::Clock::now() + std::chrono::duration_cast<LayoutControl::Clock::duration>(
                                                                              std::chrono::duration<double>(control_.dotSeconds)));
    auto dotTooSlow = [&] {
        if (dotDeadline >= control_.deadline) return overBudget();
        return failed("dot took more than its " + seconds(control_.dotSeconds) + " s on " + size);
    };

    if (!process_) process_ = std::make_unique<HelperProcess>(control_.program, "--layout-process", "layout process");
    auto gone = [&] {
        const int status = process_->ended();
        std::string how = status >= 0 && WIFSIGNALED(status) ? "ended with " + signalName(WTERMSIG(status))
                          : status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == kOutOfMemory
                              ? "ran out of memory"
                              : "ended without a layout (exit status " + std::to_string(status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
        return failed("the layout process (" + control_.program + ") " + how + " (dot on " + size + ")");
    };
    // A fresh process for every request: dot keeps state from one layout to the next in a
    // process (the same view laid out three times in one process came out three ways), so only
    // a fresh one lays the same view out the same way every time.
    std::string why;
    if (!process_->start(why)) return layered(failed(why));
    if (!process_->send(json{{"parent", static_cast<long long>(::getpid())}}.dump())) return layered(gone());
    if (!process_->send(layoutRequestBytes(request))) return layered(gone());
    std::string frame;
    switch (process_->receive(frame, dotDeadline, stop, why)) {
        case HelperProcess::Wait::Frame:
            break;
        case HelperProcess::Wait::Stopped:
            return cancelled();
        case HelperProcess::Wait::Deadline:
            process_->kill();
            return layered(dotTooSlow());
        case HelperProcess::Wait::Failed:
            return layered(failed(why));
        case HelperProcess::Wait::Ended:
            return layered(gone());
    }
    process_->kill();  // it has answered: it ends (or has ended) anyway
    try {
        auto result = layoutResultFromBytes(frame);
        // What came back must fit the request, or the view would index past it.
        if (result.error.empty() && (result.nodeCenters.size() != request.nodes.size() || result.edgePaths.size() != request.edges.size() ||
                                     result.edgeTips.size() != request.edges.size() || result.clusterBoxes.size() != request.clusters.size()))
            throw std::runtime_error("its sizes do not match the request");
        return result.error.empty() ? result : layered(result);
    } catch (const std::exception& e) {
        return layered(failed(std::string("the layout process sent a layout that cannot be read: ") + e.what()));
    }
}

int layoutProcessMain(int fd) {
    try {
        std::string frame;
        if (!receiveFrame(fd, frame)) return 0;
        if (!bindToParent(json::parse(frame).at("parent").get<long long>())) return 0;
        // One request, in a Graphviz that has laid out nothing before.
        if (!receiveFrame(fd, frame)) return 0;
        LayoutResult result;
        try {
            result = layoutGraph(layoutRequestFromBytes(frame));
        } catch (const std::bad_alloc&) {
            throw;
        } catch (const std::exception& e) {
            result = failed(std::string("the layout process could not read the request: ") + e.what());
        }
        sendFrame(fd, layoutResultBytes(result));
        return 0;
    } catch (const std::bad_alloc&) {
        return kOutOfMemory;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "layout process: %s\n", e.what());
        return 1;
    }
}

}  // namespace tv
