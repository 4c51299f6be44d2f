// Layouts that can be stopped: dot in a helper process, with a budget, a stop flag and progress.
//
// Dot has no interrupt and no progress callback, and its time grows faster than the graph: even
// under the node and edge bounds (graph_layout.hpp) a view can take a minute. A LayoutSession runs
// each request in a layout process of its own (process/helper_process.hpp: `PROGRAM
// --layout-process 3`), so that a Cancel or the budget ends the layout for certain, within the
// 50 ms the parent polls at, and the process with it. A fresh process per request also makes
// layouts reproducible: dot keeps state from one layout to the next in a process (the same view
// laid out three times in one process came out three ways). Without a program,
// the session lays out in this process (as layoutGraph does: it cannot be stopped, but its
// deadline and stop flag are still looked at between requests).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "layout/graph_layout.hpp"

namespace tv {

class HelperProcess;

/// Where and within what a layout runs.
struct LayoutControl {
    using Clock = std::chrono::steady_clock;
    /// An executable serving `--layout-process FD` (layoutProcessMain); empty: in this process.
    std::string program;
    /// Set to stop the layout: the process is killed and the result says it was cancelled.
    const std::atomic<bool>* stop = nullptr;
    /// Past it, the process is killed and the result says the budget ran out.
    Clock::time_point deadline = Clock::time_point::max();
    /// The budget in seconds, for the message (0: none given).
    double budgetSeconds = 0;
    /// What dot cannot draw (past its node and edge bounds, its time, or failing) the quick
    /// layered layout draws, and the result says why (LayoutResult::fallback). False: dot or an
    /// error. A cancel is never drawn: it ends the layout.
    bool fallback = true;
    /// Dot's time for one request, in seconds (0: up to the deadline); past it, the layered layout.
    double dotSeconds = 0;
    /// Called before each request is laid out: its number in the session (from 0), and its size.
    std::function<void(std::size_t index, std::size_t nodes, std::size_t edges)> onRequest;
};

/// Several requests laid out under one control (e.g. both sides of a view).
class LayoutSession {
public:
    explicit LayoutSession(LayoutControl control);
    ~LayoutSession();
    LayoutSession(const LayoutSession&) = delete;
    LayoutSession& operator=(const LayoutSession&) = delete;

    /// Lays out one request. On a cancel the result has `error` and `cancelled` set, and so have
    /// all later requests of the session. Past the deadline, dot is stopped and the request (and
    /// every later one) is drawn by the layered layout, or, without fallback, `error` and
    /// `overBudget` are set.
    LayoutResult layout(const LayoutRequest& request);

private:
    LayoutControl control_;
    std::unique_ptr<HelperProcess> process_;
    std::size_t requests_ = 0;
};

/// The layout process itself: serves one layout request on socket `fd`. A program
/// whose layouts run in layout processes calls this first thing when its arguments are
/// `--layout-process FD` (trainverify-studio does). Returns the exit status.
int layoutProcessMain(int fd);

/// A request and a result as the layout process exchanges them (CBOR); exact (doubles as they are).
std::string layoutRequestBytes(const LayoutRequest& request);
LayoutRequest layoutRequestFromBytes(const std::string& bytes);  ///< throws on malformed bytes
std::string layoutResultBytes(const LayoutResult& result);
LayoutResult layoutResultFromBytes(const std::string& bytes);    ///< throws on malformed bytes

}  // namespace tv
