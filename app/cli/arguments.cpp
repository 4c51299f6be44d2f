#include "cli/arguments.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "model/text.hpp"
#include "pickle/pickle.hpp"

namespace tv::cli {

int usageError(const std::string& msg) {
    std::fprintf(stderr, "trainverify: %s\n(see trainverify --help)\n", printableMessage(msg).c_str());
    return 3;
}

bool isPickleFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char head[2] = {0, 0};
    in.read(head, 2);
    return in.gcount() == 2 && pickle::looksLikePickle(std::string_view(head, 2));
}

void printPickleHint(const std::string& path, const std::string& command, std::FILE* to) {
    if (!isPickleFile(path)) return;
    std::fprintf(to, "hint: give the pair as trainverify %s --logical Gs.pkl --parallel Gp.pkl "
                         "(trainverify inspect %s shows what the pickle holds)\n", command.c_str(), path.c_str());
}

bool writeOutput(const std::string& path, const std::string& text) {
    if (path == "-") {
        std::cout << text;
        return true;
    }
    std::ofstream f(path, std::ios::binary);
    if (!f || !(f << text) || !f.flush()) {
        std::fprintf(stderr, "trainverify: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        return false;
    }
    return true;
}

bool parseCount(const std::string& text, std::int64_t& out) {
    if (text.empty() || text.size() > 12) return false;
    for (char c : text)
        if (c < '0' || c > '9') return false;
    out = std::stoll(text);
    return true;
}

bool parseNumber(const std::string& text, double& out) {
    try {
        std::size_t pos = 0;
        out = std::stod(text, &pos);
        return pos == text.size() && out >= 0 && out < 1e7;
    } catch (...) {
        return false;
    }
}

Arguments& Arguments::flag(std::initializer_list<std::string_view> names, bool* out) {
    return flag(names, [out] { *out = true; });
}

Arguments& Arguments::flag(std::initializer_list<std::string_view> names, std::function<void()> apply) {
    options_.push_back({{names.begin(), names.end()}, false, {}, [apply = std::move(apply)](const std::string&) {
                            apply();
                            return std::string();
                        }});
    return *this;
}

Arguments& Arguments::text(std::initializer_list<std::string_view> names, std::string* out, std::string need, bool dashAllowed) {
    return value(names, need, [out, need, dashAllowed](const std::string& v) {
        if (!dashAllowed && v == "-") return need;
        *out = v;
        return std::string();
    });
}

Arguments& Arguments::list(std::initializer_list<std::string_view> names, std::vector<std::string>* out, std::string need) {
    value(names, std::move(need), [out](const std::string& v) {
        out->push_back(v);
        return std::string();
    });
    options_.back().many = true;
    return *this;
}

Arguments& Arguments::value(std::initializer_list<std::string_view> names, std::string need, Apply apply) {
    options_.push_back({{names.begin(), names.end()}, true, std::move(need), std::move(apply)});
    return *this;
}

Arguments& Arguments::count(std::initializer_list<std::string_view> names, std::int64_t min, std::int64_t max, std::function<void(std::int64_t)> set,
                            std::string range, std::string notANumber) {
    const std::string name(*names.begin());
    if (range.empty()) range = name + " must be from " + std::to_string(min) + " to " + std::to_string(max);
    if (notANumber.empty()) notANumber = name + " needs a whole number";
    return value(names, notANumber, [min, max, set = std::move(set), range, notANumber](const std::string& v) {
        std::int64_t n = 0;
        if (!parseCount(v, n)) return notANumber;
        if (n < min || n > max) return range;
        set(n);
        return std::string();
    });
}

Arguments& Arguments::positional(std::string* out, std::string tooMany) {
    positional_ = out;
    tooMany_ = std::move(tooMany);
    return *this;
}

const Arguments::Option* Arguments::find(const std::string& name) const {
    for (const auto& o : options_)
        for (const auto& n : o.names)
            if (n == name) return &o;
    return nullptr;
}

std::string Arguments::parse(const std::vector<std::string>& args) const {
    bool positionalSeen = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& a = args[i];
        if (const auto* o = find(a)) {
            if (o->takesValue && i + 1 >= args.size()) return o->need;
            if (auto problem = o->apply(o->takesValue ? args[++i] : std::string()); !problem.empty()) return problem;
            while (o->many && i + 1 < args.size() && !(args[i + 1].size() > 1 && args[i + 1][0] == '-'))
                if (auto problem = o->apply(args[++i]); !problem.empty()) return problem;
        } else if (a.size() > 1 && a[0] == '-') {
            return command_ + ": unknown option " + a;
        } else if (!positional_) {
            return command_ + ": unexpected argument " + a;
        } else if (positionalSeen) {
            return tooMany_;
        } else {
            *positional_ = a;
            positionalSeen = true;
        }
    }
    return {};
}

}  // namespace tv::cli
