// The one shape of a problem in core: where, and why. Operations on input a person wrote (a plan
// file, the generator's options, a mutation request) return their problems in a result rather than
// throw them past their module (docs/architecture.md, "Errors").
#pragma once

#include <string>

namespace tv {

/// One problem found in what was given: where and why.
struct PlanProblem {
    /// Where: a JSON pointer into a plan file (e.g. /parallel/ops/3/inputs/1), prefixed by the
    /// file's path once the session names it; for options, the option's name (e.g. "tp").
    std::string path;
    std::string message;  ///< names the op, tensor or value involved; no command or flag of a front end
    std::string toString() const { return (path.empty() ? std::string() : path + ": ") + message; }
};

}  // namespace tv
