#include "verify/report_html.hpp"

#include <cstdio>
#include <sstream>

namespace tv {

std::string htmlEscape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

namespace {

constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1d2330; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
.verdict { display: inline-block; padding: .15em .6em; border-radius: .3em; color: #fff; font-weight: 600; }
.equivalent { background: #2e7d32; } .not_equivalent { background: #c62828; } .inconclusive { background: #ef6c00; } .invalid { background: #6a1b9a; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #d5d9e0; padding: .2em .6em; text-align: left; vertical-align: top; }
th { background: #f1f3f6; } code, .values { font-family: ui-monospace, monospace; font-size: .92em; }
.values { max-width: 40em; overflow-wrap: anywhere; }
tr.failed td { background: #fdecea; } tr.inconclusive td { background: #fff3e0; } tr.skipped td { color: #777; }
.muted { color: #5b6475; }
)";

void row(std::ostringstream& os, const char* key, const std::string& value) {
    if (value.empty()) return;
    os << "<tr><th>" << key << "</th><td><code>" << htmlEscape(value) << "</code></td></tr>\n";
}

std::string shapeText(const Shape& s) { return shapeToString(s); }

void valuesTable(std::ostringstream& os, const char* title, const std::vector<TensorValues>& values) {
    if (values.empty()) return;
    os << "<h3>" << title << "</h3>\n<table><tr><th>tensor</th><th>shape (reduced from)</th><th>rank</th><th>microbatch</th><th>values</th></tr>\n";
    for (const auto& v : values) {
        std::string vals;
        for (std::size_t i = 0; i < v.values.size(); ++i) vals += (i ? ", " : "") + v.values[i];
        os << "<tr><td><code>" << htmlEscape(v.name) << "</code></td><td>" << htmlEscape(shapeText(v.shape)) << " (" << htmlEscape(shapeText(v.fullShape))
           << ")</td><td>" << (v.rank >= 0 ? std::to_string(v.rank) : "") << "</td><td>" << (v.microbatch >= 0 ? std::to_string(v.microbatch) : "")
           << "</td><td class=\"values\">[" << htmlEscape(vals) << "]</td></tr>\n";
    }
    os << "</table>\n";
}

void failureSection(std::ostringstream& os, const Failure& f, const char* heading) {
    os << "<h2>" << heading << ": " << htmlEscape(describe(f.kind)) << "</h2>\n";
    if (!f.message.empty()) os << "<p>" << htmlEscape(f.message) << "</p>\n";
    os << "<table>\n";
    row(os, "stage", f.stage == kNone ? std::string() : std::to_string(f.stage));
    row(os, "parallel op", f.parallelOp);
    auto sourceText = [](const std::optional<SourceLine>& s) {
        return s ? s->toString() + (s->code.empty() ? std::string() : ": " + s->code) : std::string();
    };
    row(os, "source", sourceText(f.source));
    row(os, "rank", f.rank >= 0 ? std::to_string(f.rank) : std::string());
    row(os, "coordinates", formatCoordinates(f.coordinates));
    row(os, "microbatch", f.microbatch >= 0 ? std::to_string(f.microbatch) : std::string());
    row(os, "logical op", f.logicalOp);
    if (!(f.logicalSource && f.source && *f.logicalSource == *f.source)) row(os, "logical source", sourceText(f.logicalSource));
    row(os, "logical tensor", f.tensor);
    row(os, "parallel tensor", f.parallelTensor);
    row(os, "slice", f.slice);
    row(os, "element", f.element);
    row(os, "expected", f.expected);
    row(os, "actual", f.actual);
    row(os, "other end", f.otherEnd);
    os << "</table>\n";
    valuesTable(os, "Example (stage inputs)", f.example);
    valuesTable(os, "Logical", f.logical);
    valuesTable(os, "Parallel", f.parallel);
    if (!f.trace) return;
    // The failing stage op by op; the divergence row is marked.
    const auto& t = *f.trace;
    auto values = [](const std::vector<TensorValues>& v) {
        std::string out;
        for (const auto& x : v) {
            std::string vals;
            for (std::size_t i = 0; i < x.values.size(); ++i) vals += (i ? ", " : "") + x.values[i];
            out += "<code>" + htmlEscape(x.name) + "</code> = [" + htmlEscape(vals) + "]<br>";
        }
        return out;
    };
    os << "<h3>The stage, op by op</h3>\n";
    if (!t.assumptions.empty()) {
        os << "<p class=\"muted\">Assumed (proven by earlier stages): ";
        for (std::size_t i = 0; i < t.assumptions.size(); ++i) os << (i ? "; " : "") << "<code>" << htmlEscape(t.assumptions[i]) << "</code>";
        os << "</p>\n";
    }
    if (t.uninterpreted) os << "<p class=\"muted\">Values of exp, log and other uninterpreted functions are the solver's choice.</p>\n";
    os << "<table><tr><th>#</th><th>parallel op</th><th>rank</th><th>microbatch</th><th>beside logical op</th><th>outputs</th><th>lineage checked</th></tr>\n";
    for (std::size_t i = 0; i < t.parallel.size(); ++i) {
        const auto& s = t.parallel[i];
        const bool div = static_cast<int>(i) == t.divergence;
        os << "<tr" << (div ? " class=\"failed divergence\"" : "") << "><td>" << i << (div ? " (divergence)" : "") << "</td><td><code>" << htmlEscape(s.op)
           << "</code> " << htmlEscape(s.kind) << "</td><td>" << (s.rank >= 0 ? std::to_string(s.rank) : "") << "</td><td>"
           << (s.microbatch >= 0 ? std::to_string(s.microbatch) : "") << "</td><td>"
           << (s.logical >= 0 ? "<code>" + htmlEscape(t.logical[static_cast<std::size_t>(s.logical)].op) + "</code>" : std::string()) << "</td><td class=\"values\">"
           << values(s.outputs) << "</td><td>";
        for (const auto& c : s.checks)
            os << "<code>" << htmlEscape(c.relation) << "</code> " << (c.holds ? "holds" : "fails at " + htmlEscape(c.element) + ": expected " + htmlEscape(c.expected) + ", actual " + htmlEscape(c.actual)) << "<br>";
        os << "</td></tr>\n";
    }
    os << "</table>\n";
}

void stageRow(std::ostringstream& os, const VerifyReport& r, const StageResult& res) {
    const std::string status(toString(res.status));
    os << "<tr class=\"stage " << status << "\"><td>" << res.stage << "</td>";
    if (res.stage < r.stagePlan.stages.size()) {
        const auto& st = r.stagePlan.stages[res.stage];
        os << "<td>" << (st.glue() ? "glue" : "op") << "</td><td>" << st.logicalOps.size() << "</td><td>" << st.parallelOps.size() << "</td>";
    } else {
        os << "<td></td><td></td><td></td>";
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.3f", res.reduceSeconds + res.encodeSeconds + res.solveSeconds);
    std::string note = res.note;
    if (res.sameAs != kNone) note = "same as stage " + std::to_string(res.sameAs) + (note.empty() ? "" : "; " + note);
    if (res.cached) note = "proven in an earlier run" + (note.empty() ? "" : "; " + note);
    os << "<td>" << status << "</td><td>" << secs << "</td><td>" << htmlEscape(note) << "</td></tr>\n";
}

}  // namespace

std::string failureToHtml(const Failure& f, const char* heading) {
    std::ostringstream os;
    failureSection(os, f, heading);
    return os.str();
}

std::string reportToHtml(const VerifyReport& r, const HtmlReportOptions& opts) {
    std::ostringstream os;
    const std::string title = opts.title.empty() ? std::string("TrainVerify report") : opts.title;
    os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << htmlEscape(title) << "</title>\n<style>" << kStyle
       << "</style></head>\n<body>\n<h1>" << htmlEscape(title) << "</h1>\n";
    if (!opts.planFile.empty()) os << "<p class=\"muted\">" << htmlEscape(opts.planFile) << "</p>\n";
    const std::string summary = reportToText(r);
    std::string rest = summary.substr(0, summary.find('\n')).substr(headline(r.verdict).size());
    if (rest.rfind(": ", 0) == 0) rest.erase(0, 2);
    os << "<p><span class=\"verdict " << toString(r.verdict) << "\">" << headline(r.verdict) << "</span> " << htmlEscape(rest) << "</p>\n";
    os << "<table><tr><th>stages</th><th>proven</th><th>failed</th><th>inconclusive</th><th>skipped</th><th>solved (unique)</th><th>jobs</th><th>seconds</th></tr>\n<tr><td>"
       << r.results.size() << "</td><td>" << r.passed << "</td><td>" << r.failed << "</td><td>" << r.inconclusive << "</td><td>" << r.skipped << "</td><td>"
       << r.uniqueStages << "</td><td>" << r.jobs << "</td><td>";
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f", r.timing.total);
    os << secs << "</td></tr></table>\n";
    if (!r.problems.empty()) {
        os << "<h2>Problems in the plan</h2>\n<ul>\n";
        for (const auto& p : r.problems) os << "<li><code>" << htmlEscape(p.toString()) << "</code></li>\n";
        os << "</ul>\n";
    }
    if (r.failure) failureSection(os, *r.failure, "Diagnosis");
    for (std::size_t i = 1; i < r.failures.size(); ++i) failureSection(os, r.failures[i], ("Further failure " + std::to_string(i)).c_str());
    if (!r.findings.empty()) {
        os << "<h2>Findings</h2>\n<ul>\n";
        for (const auto& f : r.findings) os << "<li>" << htmlEscape(f) << "</li>\n";
        os << "</ul>\n";
    }
    if (!r.warnings.empty()) {
        os << "<h2>Warnings</h2>\n<ul>\n";
        for (const auto& w : r.warnings) os << "<li>" << htmlEscape(w) << "</li>\n";
        os << "</ul>\n";
    }
    if (!r.results.empty()) {
        static const char* head = "<table><tr><th>stage</th><th>kind</th><th>logical ops</th><th>parallel ops</th><th>status</th><th>seconds</th><th>note</th></tr>\n";
        os << "<h2>Stages</h2>\n" << head;
        const bool fold = r.results.size() > opts.foldAbove;
        std::size_t folded = 0;
        for (const auto& res : r.results) {
            if (fold && res.status == StageStatus::Equivalent) {
                ++folded;
                continue;
            }
            stageRow(os, r, res);
        }
        os << "</table>\n";
        if (folded) {
            os << "<details><summary>" << folded << " proven stages</summary>\n" << head;
            for (const auto& res : r.results)
                if (res.status == StageStatus::Equivalent) stageRow(os, r, res);
            os << "</table></details>\n";
        }
    }
    os << "<p class=\"muted\">Written by trainverify " << TV_VERSION << ".</p>\n</body></html>\n";
    return os.str();
}

}  // namespace tv
