// The verification report as one self-contained HTML page (inline CSS, no scripts, no external
// resources): the verdict and counts, the diagnosis with its Alive2-like sections, and the stage
// table. It carries the data of reportToJson, for people rather than CI.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "verify/verifier.hpp"

namespace tv {

struct HtmlReportOptions {
    std::string title;             ///< e.g. the plan's name; empty: "TrainVerify report"
    std::string planFile;          ///< shown under the title when set
    std::size_t foldAbove = 200;   ///< with more stages than this, proven ones fold into <details>
};

/// Escapes &, <, >, " and ' for HTML text and attribute values.
std::string htmlEscape(std::string_view s);

/// One diagnosis as an HTML fragment (heading, location table, Example / Logical / Parallel
/// values): what the report page and the Studio's failure panel show.
std::string failureToHtml(const Failure& failure, const char* heading = "Diagnosis");

std::string reportToHtml(const VerifyReport& report, const HtmlReportOptions& opts = {});

}  // namespace tv
