#include "verify/diagnosis.hpp"

#include <algorithm>
#include <array>
#include <sstream>
#include <stdexcept>

namespace tv {

namespace {
constexpr std::array<std::string_view, 9> kKindNames = {
    "counterexample", "dataflow_broken", "shape_mismatch", "shape_reduction_infeasible",
    "lane_misalignment", "unsupported_operator", "inconclusive", "invalid_plan", "unclaimed_output"};
}

std::string_view toString(FailureKind k) { return kKindNames[static_cast<std::size_t>(k)]; }

std::string_view describe(FailureKind k) {
    switch (k) {
        case FailureKind::Counterexample: return "values differ (counterexample)";
        case FailureKind::DataflowBroken: return "dataflow broken";
        case FailureKind::ShapeMismatch: return "shapes disagree";
        case FailureKind::ShapeReductionInfeasible: return "shapes cannot be reduced";
        case FailureKind::LaneMisalignment: return "reads another microbatch's data";
        case FailureKind::UnsupportedOperator: return "operator without semantics";
        case FailureKind::Inconclusive: return "inconclusive (the solver gave up)";
        case FailureKind::InvalidPlan: return "invalid plan";
        case FailureKind::UnclaimedOutput: return "result not covered by lineage";
    }
    return "unknown failure";
}

std::string formatCoordinates(const nlohmann::json& coordinates) {
    std::string out;
    if (!coordinates.is_object()) return out;
    for (auto it = coordinates.begin(); it != coordinates.end(); ++it) {
        if (!out.empty()) out += ' ';
        out += it.key() + "=" + (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
    }
    return out;
}

FailureKind failureKindFromString(std::string_view name) {
    for (std::size_t i = 0; i < kKindNames.size(); ++i)
        if (kKindNames[i] == name) return static_cast<FailureKind>(i);
    throw std::invalid_argument("unknown failure kind \"" + std::string(name) + "\"");
}

namespace {
// Readers of the report's own JSON: an optional member, null or absent meaning the default.
std::string stringOr(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? std::string() : it->get<std::string>();
}
template <class T>
T numberOr(const nlohmann::json& j, const char* key, T otherwise) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? otherwise : it->get<T>();
}
std::vector<TensorValues> valuesList(const nlohmann::json& a) {
    std::vector<TensorValues> v;
    for (const auto& t : a) v.push_back(TensorValues::fromJson(t));
    return v;
}
}  // namespace

TensorValues TensorValues::fromJson(const nlohmann::json& j) {
    TensorValues t;
    t.name = j.at("name").get<std::string>();
    t.shape = j.at("shape").get<Shape>();
    t.fullShape = j.at("full_shape").get<Shape>();
    t.values = j.at("values").get<std::vector<std::string>>();
    t.rank = numberOr<std::int32_t>(j, "rank", -1);
    t.microbatch = numberOr<std::int32_t>(j, "microbatch", -1);
    return t;
}

TraceStep TraceStep::fromJson(const nlohmann::json& j) {
    TraceStep s;
    s.parallel = j.at("side").get<std::string>() == "parallel";
    s.op = j.at("op").get<std::string>();
    s.kind = j.at("kind").get<std::string>();
    s.rank = numberOr<std::int32_t>(j, "rank", -1);
    s.microbatch = numberOr<std::int32_t>(j, "microbatch", -1);
    if (auto it = j.find("group"); it != j.end()) s.group = it->get<std::vector<std::int32_t>>();
    s.inputs = valuesList(j.at("inputs"));
    s.outputs = valuesList(j.at("outputs"));
    if (auto it = j.find("checks"); it != j.end())
        for (const auto& x : *it) {
            LineageCheck c;
            c.relation = x.at("relation").get<std::string>();
            c.holds = x.at("holds").get<bool>();
            c.element = stringOr(x, "element");
            c.expected = stringOr(x, "expected");
            c.actual = stringOr(x, "actual");
            if (auto sh = x.find("shape"); sh != x.end()) c.shape = sh->get<Shape>();
            if (auto ev = x.find("expected_values"); ev != x.end()) c.expectedValues = ev->get<std::vector<std::string>>();
            if (auto av = x.find("actual_values"); av != x.end()) c.actualValues = av->get<std::vector<std::string>>();
            if (c.expectedValues.size() != c.actualValues.size()) c.expectedValues.clear(), c.actualValues.clear();
            s.checks.push_back(std::move(c));
        }
    s.logical = numberOr<int>(j, "logical_step", -1);
    return s;
}

StageTrace StageTrace::fromJson(const nlohmann::json& j) {
    StageTrace t;
    for (const auto& s : j.at("logical")) t.logical.push_back(TraceStep::fromJson(s));
    for (const auto& s : j.at("parallel")) t.parallel.push_back(TraceStep::fromJson(s));
    t.assumptions = j.at("assumptions").get<std::vector<std::string>>();
    t.divergence = j.at("divergence").get<int>();
    t.misaligned = numberOr<int>(j, "misaligned", -1);
    t.uninterpreted = numberOr<bool>(j, "uninterpreted", false);
    return t;
}

Failure Failure::fromJson(const nlohmann::json& j) {
    Failure f;
    f.kind = failureKindFromString(j.at("kind").get<std::string>());
    f.stage = numberOr<std::uint32_t>(j, "stage", kNone);
    f.logicalOp = stringOr(j, "logical_op");
    f.parallelOp = stringOr(j, "parallel_op");
    auto sourceOf = [&](const char* key) -> std::optional<SourceLine> {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) return std::nullopt;
        SourceLine s;
        s.file = it->at("file").get<std::string>();
        s.line = it->at("line").get<std::int32_t>();
        s.function = stringOr(*it, "function");
        s.code = stringOr(*it, "code");
        return s;
    };
    f.source = sourceOf("source");
    f.logicalSource = sourceOf("logical_source");
    f.rank = numberOr<std::int32_t>(j, "rank", -1);
    if (auto it = j.find("coordinates"); it != j.end()) f.coordinates = *it;
    f.microbatch = numberOr<std::int32_t>(j, "microbatch", -1);
    f.tensor = stringOr(j, "tensor");
    f.parallelTensor = stringOr(j, "parallel_tensor");
    f.slice = stringOr(j, "slice");
    f.element = stringOr(j, "element");
    f.expected = stringOr(j, "expected");
    f.actual = stringOr(j, "actual");
    f.message = j.at("message").get<std::string>();
    f.otherEnd = stringOr(j, "other_end");
    if (auto it = j.find("other_end_tensor"); it != j.end()) {
        f.otherEndLogical = it->at("side").get<std::string>() == "logical";
        f.otherEndTensor = it->at("tensor").get<std::string>();
    }
    if (auto it = j.find("trace"); it != j.end()) f.trace = std::make_shared<const StageTrace>(StageTrace::fromJson(*it));
    if (auto it = j.find("values"); it != j.end()) {
        f.example = valuesList(it->at("example"));
        f.logical = valuesList(it->at("logical"));
        f.parallel = valuesList(it->at("parallel"));
    }
    return f;
}

bool isInconclusive(FailureKind k) {
    return k == FailureKind::Inconclusive || k == FailureKind::UnsupportedOperator ||
           k == FailureKind::ShapeReductionInfeasible || k == FailureKind::UnclaimedOutput;
}

nlohmann::json TensorValues::toJson() const {
    nlohmann::json j = {{"name", name}, {"shape", shape}, {"full_shape", fullShape}, {"values", values}};
    if (rank >= 0) j["rank"] = rank;
    if (microbatch >= 0) j["microbatch"] = microbatch;
    return j;
}

std::string TensorValues::toText() const {
    std::string out = name + " " + shapeToString(shape);
    if (fullShape != shape) out += " (reduced from " + shapeToString(fullShape) + ")";
    if (rank >= 0) out += " rank " + std::to_string(rank);
    if (microbatch >= 0) out += " microbatch " + std::to_string(microbatch);
    out += "\n";
    const std::size_t cols = shape.empty() ? 1 : static_cast<std::size_t>(std::max<std::int64_t>(1, shape.back()));
    for (std::size_t i = 0; i < values.size(); ++i) {
        out += values[i];
        out += (i + 1) % cols == 0 || i + 1 == values.size() ? "\n" : "\t";
    }
    return out;
}

nlohmann::json Failure::toJson() const {
    auto orNull = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
    nlohmann::json j = {
        {"kind", toString(kind)},
        {"stage", stage == kNone ? nlohmann::json() : nlohmann::json(stage)},
        {"logical_op", orNull(logicalOp)},
        {"parallel_op", orNull(parallelOp)},
        {"rank", rank >= 0 ? nlohmann::json(rank) : nlohmann::json()},
        {"coordinates", coordinates},
        {"microbatch", microbatch >= 0 ? nlohmann::json(microbatch) : nlohmann::json()},
        {"tensor", orNull(tensor)},
        {"parallel_tensor", orNull(parallelTensor)},
        {"slice", orNull(slice)},
        {"element", orNull(element)},
        {"expected", orNull(expected)},
        {"actual", orNull(actual)},
        {"message", message},
    };
    if (!otherEnd.empty()) j["other_end"] = otherEnd;
    auto sourceJson = [](const SourceLine& s) {
        nlohmann::json o = {{"file", s.file}, {"line", s.line}};
        if (!s.function.empty()) o["function"] = s.function;
        if (!s.code.empty()) o["code"] = s.code;
        return o;
    };
    if (source) j["source"] = sourceJson(*source);
    if (logicalSource) j["logical_source"] = sourceJson(*logicalSource);
    if (trace) j["trace"] = trace->toJson();
    if (!otherEndTensor.empty()) j["other_end_tensor"] = {{"side", otherEndLogical ? "logical" : "parallel"}, {"tensor", otherEndTensor}};
    auto list = [](const std::vector<TensorValues>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& t : v) a.push_back(t.toJson());
        return a;
    };
    if (!example.empty() || !logical.empty() || !parallel.empty())
        j["values"] = {{"example", list(example)}, {"logical", list(logical)}, {"parallel", list(parallel)}};
    return j;
}

namespace {
std::string valuesLine(const TensorValues& t) {
    std::ostringstream os;
    os << "  " << t.name << " " << shapeToString(t.shape);
    if (t.shape != t.fullShape) os << " (reduced from " << shapeToString(t.fullShape) << ")";
    if (t.rank >= 0) os << " rank " << t.rank;
    if (t.microbatch >= 0) os << " mb " << t.microbatch;
    os << " = [";
    for (std::size_t i = 0; i < t.values.size(); ++i) {
        if (i) os << ", ";
        if (i == 16) {
            os << "... (" << t.values.size() << " values)";
            break;
        }
        os << t.values[i];
    }
    os << "]\n";
    return os.str();
}
}  // namespace

std::string Failure::toText() const {
    std::ostringstream os;
    os << "  " << toString(kind);
    if (stage != kNone) os << " in stage " << stage;
    os << ": " << message << "\n";
    if (!parallelOp.empty()) {
        os << "  at parallel op " << parallelOp;
        if (rank >= 0) os << " on rank " << rank;
        if (!coordinates.empty()) os << " (" << formatCoordinates(coordinates) << ")";
        if (microbatch >= 0) os << ", microbatch " << microbatch;
        os << "\n";
        if (source) os << "  source " << source->toString() << (source->code.empty() ? "" : ": " + source->code) << "\n";
    }
    if (!logicalOp.empty()) {
        os << "  logical op " << logicalOp << "\n";
        if (logicalSource && !(source && *source == *logicalSource))
            os << "  logical source " << logicalSource->toString() << (logicalSource->code.empty() ? "" : ": " + logicalSource->code) << "\n";
    }
    if (!tensor.empty()) {
        os << "  tensor " << tensor;
        if (!slice.empty()) os << " slice " << slice;
        if (!parallelTensor.empty()) os << " held by " << parallelTensor;
        os << "\n";
    }
    if (!otherEnd.empty()) os << "  other end: " << otherEnd << "\n";
    if (!example.empty()) {
        os << "\nExample:\n";
        for (const auto& t : example) os << valuesLine(t);
    }
    if (!logical.empty()) {
        os << "\nLogical:\n";
        for (const auto& t : logical) os << valuesLine(t);
    }
    if (!parallel.empty()) {
        os << "\nParallel:\n";
        for (const auto& t : parallel) os << valuesLine(t);
    }
    if (!expected.empty() || !actual.empty()) {
        os << "\nExpected vs Actual:\n";
        os << "  " << tensor << (element.empty() ? "" : element) << ": expected " << expected << ", actual " << actual << "\n";
    }
    return os.str();
}

nlohmann::json TraceStep::toJson() const {
    nlohmann::json j = {{"side", parallel ? "parallel" : "logical"}, {"op", op}, {"kind", kind}};
    if (rank >= 0) j["rank"] = rank;
    if (microbatch >= 0) j["microbatch"] = microbatch;
    if (!group.empty()) j["group"] = group;
    auto list = [](const std::vector<TensorValues>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& t : v) a.push_back(t.toJson());
        return a;
    };
    j["inputs"] = list(inputs);
    j["outputs"] = list(outputs);
    if (!checks.empty()) {
        nlohmann::json c = nlohmann::json::array();
        for (const auto& k : checks) {
            nlohmann::json x = {{"relation", k.relation}, {"holds", k.holds}};
            if (!k.holds) {
                x["element"] = k.element;
                x["expected"] = k.expected;
                x["actual"] = k.actual;
                if (!k.expectedValues.empty()) {
                    x["shape"] = k.shape;
                    x["expected_values"] = k.expectedValues;
                    x["actual_values"] = k.actualValues;
                }
            }
            c.push_back(std::move(x));
        }
        j["checks"] = std::move(c);
    }
    if (logical >= 0) j["logical_step"] = logical;
    return j;
}

nlohmann::json StageTrace::toJson() const {
    nlohmann::json l = nlohmann::json::array(), p = nlohmann::json::array();
    for (const auto& s : logical) l.push_back(s.toJson());
    for (const auto& s : parallel) p.push_back(s.toJson());
    nlohmann::json j = {{"logical", std::move(l)}, {"parallel", std::move(p)}, {"assumptions", assumptions}, {"divergence", divergence}};
    if (misaligned >= 0) j["misaligned"] = misaligned;
    if (uninterpreted) j["uninterpreted"] = true;
    return j;
}

}  // namespace tv
