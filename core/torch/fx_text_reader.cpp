// The printed form of a captured graph (`GraphModule.forward` as `print_readable` writes it).
//
// The printer writes one statement per line, in a small part of Python, and this reader accepts
// exactly that part: the `def forward(self, NAME: "ANNOT", ...)` line (or `def forward(self,
// primals, tangents)` with `NAME: "ANNOT"; ...` declarations and a `... = fx_pytree.tree_flatten_spec`
// line that orders them), `NAME: "ANNOT" = CALL` and `NAME = CALL` (an operator call, `NAME[K]`, or
// `self._tensor_constantN`), each optionally followed by `; a = b = None`, the `# File:` comments,
// and one `return`. Anything else is refused with its line: nothing is guessed.
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "torch/torch_graph.hpp"

namespace tv::torch {

class GraphBuilder {
public:
    GraphBuilder(TorchGraph& g, const ReadLimits& limits) : g_(g), limits_(limits) {}

    int add(Node n, const std::string& file) {
        if (g_.nodes.size() >= limits_.maxNodes)
            throw TorchGraphError(file, n.line, "more than " + std::to_string(limits_.maxNodes) + " nodes: refused");
        if (g_.byName_.count(n.name))
            throw TorchGraphError(file, n.line, n.name + " is defined twice (first on line " +
                                                    std::to_string(g_.nodes[static_cast<std::size_t>(g_.byName_.at(n.name))].line) + ")");
        const int id = static_cast<int>(g_.nodes.size());
        g_.byName_.emplace(n.name, id);
        if (n.kind == Node::Kind::Input) g_.inputs.push_back(id);
        g_.nodes.push_back(std::move(n));
        return id;
    }
    int source(SourceLine s) {
        auto key = s.file + '\n' + std::to_string(s.line) + '\n' + s.function + '\n' + s.code;
        auto it = sources_.find(key);
        if (it != sources_.end()) return it->second;
        const int id = static_cast<int>(g_.sources.size());
        g_.sources.push_back(std::move(s));
        sources_.emplace(std::move(key), id);
        return id;
    }

private:
    TorchGraph& g_;
    const ReadLimits& limits_;
    std::unordered_map<std::string, int> sources_;
};

namespace {

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isIdentChar(char c) { return isIdentStart(c) || (c >= '0' && c <= '9'); }

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

/// A printable excerpt of what the reader did not understand.
std::string excerpt(std::string_view s) {
    std::string out;
    for (char c : s.substr(0, 60)) out += (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) ? '?' : c;
    if (s.size() > 60) out += "...";
    return out;
}

/// One line of the printed form, read from left to right.
class LineReader {
public:
    LineReader(std::string_view s, const std::string& file, int line, const ReadLimits& limits, const TorchGraph& g)
        : s_(s), file_(file), line_(line), limits_(limits), g_(g) {}

    [[noreturn]] void fail(const std::string& what) const { throw TorchGraphError(file_, line_, what); }
    void failHere(const std::string& what) const {
        fail(what + (pos_ < s_.size() ? " at \"" + excerpt(s_.substr(pos_)) + "\"" : " at the end of the line"));
    }

    void skip() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
    }
    bool atEnd() {
        skip();
        return pos_ >= s_.size();
    }
    bool accept(std::string_view t) {
        skip();
        if (s_.substr(pos_, t.size()) != t) return false;
        pos_ += t.size();
        return true;
    }
    void expect(std::string_view t) {
        if (!accept(t)) failHere("expected \"" + std::string(t) + "\"");
    }
    std::string_view peekIdent() {
        skip();
        std::size_t e = pos_;
        if (e < s_.size() && isIdentStart(s_[e]))
            while (e < s_.size() && isIdentChar(s_[e])) ++e;
        return s_.substr(pos_, e - pos_);
    }
    std::string ident() {
        auto id = peekIdent();
        if (id.empty()) failHere("expected a name");
        pos_ += id.size();
        return std::string(id);
    }
    /// a.b.c
    std::string dotted() {
        std::string out = ident();
        while (pos_ < s_.size() && s_[pos_] == '.' && pos_ + 1 < s_.size() && isIdentStart(s_[pos_ + 1])) {
            ++pos_;
            out += '.';
            out += ident();
        }
        return out;
    }
    std::string quoted() {
        skip();
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) failHere("expected a string");
        const char q = s_[pos_++];
        std::string out;
        while (true) {
            if (pos_ >= s_.size()) fail("a string is not closed");
            char c = s_[pos_++];
            if (c == q) break;
            if (c == '\\') {
                if (pos_ >= s_.size()) fail("a string is not closed");
                char e = s_[pos_++];
                switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '0': out += '\0'; break;
                case '\\': case '\'': case '"': out += e; break;
                default: out += '\\'; out += e;
                }
                continue;
            }
            out += c;
        }
        return out;
    }

    /// Items separated by commas, a trailing comma allowed, up to `close` (already past the opening
    /// bracket): `each` reads one item.
    template <class F>
    void items(std::string_view close, F&& each) {
        bool first = true;
        while (!accept(close)) {
            if (!first) expect(",");
            first = false;
            if (accept(close)) break;
            each();
        }
    }

    /// "f32[8, 1536]"
    TensorType annotation() {
        const auto text = quoted();
        return parseAnnotation(text);
    }
    TensorType parseAnnotation(const std::string& text) const {
        const auto open = text.find('[');
        if (open == std::string::npos || text.back() != ']')
            fail("cannot read the annotation \"" + excerpt(text) + "\" (expected a dtype and a shape, as \"f32[8, 1536]\")");
        TensorType t;
        const auto dt = dtypeFromShortName(std::string_view(text).substr(0, open));
        if (!dt) fail("unknown dtype \"" + excerpt(text.substr(0, open)) + "\" in the annotation \"" + excerpt(text) + "\"");
        t.dtype = *dt;
        std::string_view dims = std::string_view(text).substr(open + 1, text.size() - open - 2);
        dims = trim(dims);
        while (!dims.empty()) {
            const auto comma = dims.find(',');
            const auto d = trim(dims.substr(0, comma));
            std::int64_t v = 0;
            const auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
            if (ec != std::errc() || p != d.data() + d.size() || d.empty()) {
                if (!d.empty() && isIdentStart(d.front()))
                    fail("the annotation \"" + excerpt(text) + "\" has a symbolic size (" + excerpt(d) + "): only graphs captured with static shapes can be read");
                fail("cannot read the size \"" + excerpt(d) + "\" in the annotation \"" + excerpt(text) + "\"");
            }
            if (v < 0 || v > limits_.maxDim) fail("the size " + std::to_string(v) + " in the annotation \"" + excerpt(text) + "\" is out of range");
            t.shape.push_back(v);
            if (static_cast<int>(t.shape.size()) > limits_.maxDims) fail("the annotation \"" + excerpt(text) + "\" has more than " + std::to_string(limits_.maxDims) + " dims");
            if (comma == std::string_view::npos) break;
            dims = dims.substr(comma + 1);
        }
        return t;
    }

    /// A number: an int when it has no '.', 'e' or "inf".
    Value number() {
        skip();
        std::size_t e = pos_;
        if (e < s_.size() && (s_[e] == '-' || s_[e] == '+')) ++e;
        while (e < s_.size() && (isIdentChar(s_[e]) || s_[e] == '.' ||
                                 ((s_[e] == '-' || s_[e] == '+') && e > pos_ && (s_[e - 1] == 'e' || s_[e - 1] == 'E'))))
            ++e;
        const auto text = s_.substr(pos_, e - pos_);
        pos_ = e;
        Value v;
        const bool isFloat = text.find_first_of(".eEn") != std::string_view::npos;
        if (!isFloat) {
            std::string_view digits = text;
            if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
            const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v.i);
            if (ec == std::errc::result_out_of_range) fail("the integer " + excerpt(text) + " does not fit in 64 bits");
            if (ec != std::errc() || p != digits.data() + digits.size()) fail("cannot read the number \"" + excerpt(text) + "\"");
            v.kind = Value::Kind::Int;
            return v;
        }
        std::string_view t = text;
        bool neg = false;
        if (!t.empty() && (t.front() == '-' || t.front() == '+')) {
            neg = t.front() == '-';
            t.remove_prefix(1);
        }
        v.kind = Value::Kind::Float;
        if (t == "inf") v.f = std::numeric_limits<double>::infinity();
        else if (t == "nan") v.f = std::numeric_limits<double>::quiet_NaN();
        else {
            const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v.f);
            if ((ec != std::errc() && ec != std::errc::result_out_of_range) || p != t.data() + t.size())
                fail("cannot read the number \"" + excerpt(text) + "\"");
        }
        if (neg) v.f = -v.f;
        return v;
    }

    Value value(int depth) {
        if (depth > limits_.maxNesting) fail("lists nested deeper than " + std::to_string(limits_.maxNesting) + ": refused");
        skip();
        if (pos_ >= s_.size()) failHere("expected a value");
        const char c = s_[pos_];
        if (c == '[' || c == '(') {
            ++pos_;
            Value v;
            v.kind = c == '[' ? Value::Kind::List : Value::Kind::Tuple;
            items(c == '[' ? "]" : ")", [&] { v.items.push_back(value(depth + 1)); });
            return v;
        }
        if (c == '\'' || c == '"') {
            Value v;
            v.kind = Value::Kind::String;
            v.text = quoted();
            return v;
        }
        if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.') return number();
        const auto id = peekIdent();
        if (id.empty()) failHere("expected a value");
        if (id == "inf" || id == "nan") return number();
        if (id == "None" || id == "True" || id == "False") {
            pos_ += id.size();
            Value v;
            if (id != "None") {
                v.kind = Value::Kind::Bool;
                v.b = id == "True";
            }
            return v;
        }
        if (id == "device") {
            pos_ += id.size();
            if (!accept("(")) failHere("expected \"(\"");
            Value v;
            v.kind = Value::Kind::Device;
            std::string type;
            std::int64_t index = -1;
            items(")", [&] {
                skip();
                if (s_.substr(pos_, 1) == "'" || s_.substr(pos_, 1) == "\"") {
                    type = quoted();
                    return;
                }
                const auto key = ident();
                expect("=");
                if (key == "type") type = quoted();
                else if (key == "index") {
                    auto n = number();
                    if (n.kind != Value::Kind::Int) fail("a device index is not an integer");
                    index = n.i;
                } else fail("unknown device argument " + key);
            });
            v.text = type + (index >= 0 ? ":" + std::to_string(index) : std::string());
            return v;
        }
        const auto name = dotted();
        if (name.rfind("torch.ops.", 0) == 0) {
            Value v;
            v.kind = Value::Kind::Operator;
            v.text = name.substr(10);
            return v;
        }
        if (name.rfind("torch.", 0) == 0) {
            const auto rest = std::string_view(name).substr(6);
            Value v;
            if (auto dt = dtypeFromTorchName(rest)) {
                v.kind = Value::Kind::DType;
                v.dtype = *dt;
                return v;
            }
            v.text = std::string(rest);
            if (rest == "strided" || rest == "sparse_coo" || rest == "sparse_csr" || rest == "_mkldnn") v.kind = Value::Kind::Layout;
            else if (rest == "contiguous_format" || rest == "preserve_format" || rest == "channels_last" || rest == "channels_last_3d")
                v.kind = Value::Kind::MemoryFormat;
            else fail("unknown torch name torch." + excerpt(rest));
            return v;
        }
        if (name.rfind("self.", 0) == 0) {
            Value v;
            v.kind = Value::Kind::Attribute;
            v.text = name.substr(5);
            return v;
        }
        if (name.find('.') != std::string::npos) fail("unknown name " + excerpt(name));
        const int n = g_.find(name);
        if (n < 0) fail(name + " is used before it is defined");
        return Value::ofNode(n);
    }

    /// The arguments of a call, after its "(": positional, then `key = value`.
    void arguments(Node& node) {
        items(")", [&] {
            // key = value?
            skip();
            const auto save = pos_;
            const auto id = peekIdent();
            if (!id.empty()) {
                pos_ += id.size();
                skip();
                if (pos_ < s_.size() && s_[pos_] == '=' && (pos_ + 1 >= s_.size() || s_[pos_ + 1] != '=')) {
                    ++pos_;
                    for (const auto& [k, _] : node.kwargs)
                        if (k == id) fail("the keyword argument " + std::string(id) + " is given twice");
                    node.kwargs.emplace_back(std::string(id), value(1));
                    return;
                }
                pos_ = save;
            }
            if (!node.kwargs.empty()) failHere("a positional argument after a keyword argument");
            node.args.push_back(value(1));
        });
    }

    /// What the `; a = b = None` tail frees: names only, all defined (or the one this line defines,
    /// a result nothing uses).
    void releaseTail(const std::string& defined = {}) {
        if (atEnd()) return;
        expect(";");
        while (true) {
            const auto name = ident();
            if (name == "None") break;
            if (g_.find(name) < 0 && name != defined) fail(name + " is released before it is defined");
            expect("=");
        }
        if (!atEnd()) failHere("unexpected text after \"= None\"");
    }

    std::size_t pos() const { return pos_; }

private:
    std::string_view s_;
    std::size_t pos_ = 0;
    const std::string& file_;
    int line_;
    const ReadLimits& limits_;
    const TorchGraph& g_;
};

/// "# File: PATH:LINE in FUNC, code: CODE"
std::optional<SourceLine> parseFileComment(std::string_view c) {
    constexpr std::string_view head = "# File: ";
    if (c.substr(0, head.size()) != head) return std::nullopt;
    c.remove_prefix(head.size());
    // PATH may hold ':' itself: the line number is the first ":DIGITS in " after it.
    std::size_t at = 0;
    while ((at = c.find(':', at)) != std::string_view::npos) {
        std::size_t e = at + 1;
        while (e < c.size() && c[e] >= '0' && c[e] <= '9') ++e;
        if (e > at + 1 && c.substr(e, 4) == " in ") break;
        ++at;
    }
    if (at == std::string_view::npos) return std::nullopt;
    SourceLine s;
    s.file = std::string(c.substr(0, at));
    std::size_t e = at + 1;
    while (e < c.size() && c[e] >= '0' && c[e] <= '9') ++e;
    const auto digits = c.substr(at + 1, e - at - 1);
    if (std::from_chars(digits.data(), digits.data() + digits.size(), s.line).ec != std::errc()) return std::nullopt;
    auto rest = c.substr(e + 4);
    const auto codeAt = rest.find(", code: ");
    s.function = std::string(rest.substr(0, codeAt));
    if (codeAt != std::string_view::npos) s.code = std::string(rest.substr(codeAt + 8));
    return s;
}

}  // namespace

TorchGraph readFxText(std::string_view text, const std::string& file, const ReadLimits& limits) {
    if (text.size() > limits.maxBytes)
        throw TorchGraphError(file, 0, "larger than " + std::to_string(limits.maxBytes >> 20) + " MiB: refused");
    if (text.find('\0') != std::string_view::npos) throw TorchGraphError(file, 0, "not text (it holds a NUL byte)");
    TorchGraph g;
    g.file = file;
    GraphBuilder build(g, limits);
    int currentSource = -1;
    bool inForward = false, returned = false, flattened = false;
    std::vector<std::string> untypedParams;                  // def forward(self, primals, tangents)
    std::unordered_map<std::string, std::pair<TensorType, int>> declared;  // NAME: "ANNOT";
    int lineNo = 0;
    std::size_t start = 0;
    while (start <= text.size()) {
        auto end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        const auto raw = text.substr(start, end - start);
        start = end + 1;
        ++lineNo;
        const auto line = trim(raw);
        if (line.empty()) {
            if (end == text.size()) break;
            continue;
        }
        if (line.front() == '#') {
            if (auto s = parseFileComment(line)) currentSource = build.source(std::move(*s));
            else if (line.rfind("# No stacktrace found", 0) == 0) currentSource = -1;
            else if (line.rfind("# Graph[", 0) == 0) {
                // # Graph[rank=0](fw, gid=0)
                LineReader r(line, file, lineNo, limits, g);
                r.expect("# Graph[");
                r.expect("rank");
                r.expect("=");
                auto rank = r.number();
                if (rank.kind != Value::Kind::Int || rank.i < 0 || rank.i > limits.maxRank) r.fail("the header's rank is not a rank");
                r.expect("]");
                r.expect("(");
                g.phase = r.ident();
                r.expect(",");
                r.expect("gid");
                r.expect("=");
                auto gid = r.number();
                if (gid.kind != Value::Kind::Int || gid.i < 0 || gid.i > limits.maxRank) r.fail("the header's gid is not a number");
                r.expect(")");
                g.rank = static_cast<int>(rank.i);
                g.gid = static_cast<int>(gid.i);
            }
            continue;
        }
        if (returned) throw TorchGraphError(file, lineNo, "a statement after the return: \"" + excerpt(line) + "\"");
        if (!inForward) {
            if (line.rfind("def forward(", 0) == 0) {
                LineReader r(line, file, lineNo, limits, g);
                r.expect("def");
                r.expect("forward");
                r.expect("(");
                if (r.ident() != "self") r.fail("forward's first parameter is not self");
                while (!r.accept(")")) {
                    r.expect(",");
                    if (r.accept(")")) break;
                    Node n;
                    n.kind = Node::Kind::Input;
                    n.name = r.ident();
                    n.line = lineNo;
                    n.source = -1;
                    if (r.accept(":")) {
                        n.type = r.annotation();
                        build.add(std::move(n), file);
                    } else {
                        untypedParams.push_back(n.name);
                    }
                }
                r.expect(":");
                if (!r.atEnd()) r.failHere("unexpected text after forward's signature");
                inForward = true;
                continue;
            }
            // The preamble: imports, `NAME: type`, the class line.
            if (line.rfind("import ", 0) == 0 || line.rfind("from ", 0) == 0 || line.rfind("class ", 0) == 0 ||
                (line.size() > 6 && line.substr(line.size() - 6) == ": type"))
                continue;
            throw TorchGraphError(file, lineNo, "not part of a printed graph: \"" + excerpt(line) + "\"");
        }
        LineReader r(line, file, lineNo, limits, g);
        if (line.rfind("return", 0) == 0 && (line.size() == 6 || line[6] == ' ' || line[6] == '(' || line[6] == '[')) {
            r.expect("return");
            Value out;
            if (r.accept("pytree.tree_unflatten(")) {
                out = r.value(1);
                r.expect(",");
                if (r.dotted() != "self._out_spec") r.fail("expected self._out_spec");
                r.expect(")");
            } else {
                out = r.value(1);
            }
            if (!r.atEnd()) r.failHere("unexpected text after the return value");
            auto flat = out.isList() ? out.items : std::vector<Value>{out};
            for (const auto& v : flat)
                if (v.kind != Value::Kind::Node && v.kind != Value::Kind::None)
                    r.fail("the graph returns " + v.toString() + ", not a node or None");
            g.outputs = std::move(flat);
            returned = true;
            continue;
        }
        // NAME: "ANNOT"; NAME: "ANNOT"  (declarations of untyped forward parameters' parts)
        // NAME, NAME, = fx_pytree.tree_flatten_spec([primals, tangents], self._in_spec)
        // NAME: "ANNOT" = RHS   /   NAME = RHS
        std::vector<std::string> targets;
        targets.push_back(r.ident());
        if (r.accept(",")) {
            while (!r.accept("=")) {
                targets.push_back(r.ident());
                r.expect(",");
            }
            if (r.dotted() != "fx_pytree.tree_flatten_spec") r.fail("expected fx_pytree.tree_flatten_spec");
            r.expect("(");
            // [primals, tangents]: forward's untyped parameters, in order
            r.expect("[");
            std::vector<std::string> params;
            r.items("]", [&] { params.push_back(r.ident()); });
            if (params != untypedParams) r.fail("the flattened parameters are not forward's parameters");
            r.expect(",");
            if (r.dotted() != "self._in_spec") r.fail("expected self._in_spec");
            r.expect(")");
            r.releaseTail();
            if (flattened) r.fail("the parameters are flattened twice");
            for (const auto& t : targets) {
                auto it = declared.find(t);
                if (it == declared.end()) r.fail(t + " is flattened from the parameters but has no declared type");
                Node n;
                n.kind = Node::Kind::Input;
                n.name = t;
                n.type = it->second.first;
                n.line = it->second.second;
                build.add(std::move(n), file);
            }
            flattened = true;
            continue;
        }
        std::optional<TensorType> type;
        if (r.accept(":")) {
            type = r.annotation();
            if (r.accept(";") || r.atEnd()) {
                // a declaration line: NAME: "ANNOT"; NAME: "ANNOT"; ...
                if (untypedParams.empty()) r.fail("a declaration without untyped forward parameters");
                declared[targets[0]] = {*type, lineNo};
                while (!r.atEnd()) {
                    const auto name = r.ident();
                    r.expect(":");
                    declared[name] = {r.annotation(), lineNo};
                    if (!r.accept(";") && !r.atEnd()) r.failHere("expected \";\"");
                }
                continue;
            }
        }
        r.expect("=");
        Node n;
        n.name = targets[0];
        n.type = type;
        n.line = lineNo;
        n.source = currentSource;
        if (!untypedParams.empty() && !flattened) r.fail(n.name + " is computed before the parameters are flattened");
        const auto callee = r.dotted();
        if (callee.rfind("torch.ops.", 0) == 0 || callee == "operator.getitem") {
            r.expect("(");
            if (callee == "operator.getitem") {
                n.kind = Node::Kind::GetItem;
                Node tmp;
                r.arguments(tmp);
                if (tmp.args.size() != 2 || !tmp.args[0].isNode() || tmp.args[1].kind != Value::Kind::Int || !tmp.kwargs.empty())
                    r.fail("operator.getitem takes a node and an index");
                n.args = {tmp.args[0]};
                n.item = static_cast<int>(tmp.args[1].i);
            } else {
                n.kind = Node::Kind::Call;
                n.target = callee.substr(10);
                r.arguments(n);
            }
        } else if (callee.rfind("self.", 0) == 0 && callee.find('.', 5) == std::string::npos) {
            n.kind = Node::Kind::Constant;
            n.target = callee.substr(5);
        } else if (callee.find('.') == std::string::npos && r.accept("[")) {
            const int of = g.find(callee);
            if (of < 0) r.fail(callee + " is used before it is defined");
            auto k = r.number();
            if (k.kind != Value::Kind::Int || k.i < 0 || k.i > 1'000'000) r.fail("an element index is not a small whole number");
            r.expect("]");
            n.kind = Node::Kind::GetItem;
            n.args = {Value::ofNode(of)};
            n.item = static_cast<int>(k.i);
        } else {
            r.fail("cannot read \"" + excerpt(line) + "\": expected an operator call (torch.ops...), NAME[K] or self._tensor_constantN");
        }
        r.releaseTail(n.name);
        build.add(std::move(n), file);
    }
    if (!inForward) throw TorchGraphError(file, 0, "no `def forward(self, ...)`: not a printed PyTorch graph");
    if (!untypedParams.empty() && !flattened)
        throw TorchGraphError(file, lineNo, "forward's parameters (" + untypedParams.front() + ", ...) are never flattened");
    if (!returned) throw TorchGraphError(file, lineNo, "the graph ends without a return (is the file cut short?)");
    return g;
}

bool looksLikeFxText(std::string_view text) {
    const auto head = text.substr(0, 1 << 16);
    return head.find("# Graph[rank=") != std::string_view::npos || head.find("def forward(self") != std::string_view::npos;
}

int rankFromFileName(const std::string& path) {
    const auto slash = path.find_last_of('/');
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    // ".rN." anywhere in the name; the last one counts.
    int rank = -1;
    for (std::size_t at = base.find(".r"); at != std::string::npos; at = base.find(".r", at + 1)) {
        std::size_t e = at + 2;
        while (e < base.size() && base[e] >= '0' && base[e] <= '9') ++e;
        if (e > at + 2 && e - at - 2 <= 6 && e < base.size() && base[e] == '.') rank = std::stoi(base.substr(at + 2, e - at - 2));
    }
    return rank;
}

}  // namespace tv::torch
