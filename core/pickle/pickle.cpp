#include "pickle/pickle.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace tv::pickle {

const char* toString(Kind k) {
    switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "big int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::FrozenSet: return "frozenset";
    case Kind::Global: return "global";
    case Kind::Instance: return "instance";
    }
    return "?";
}

namespace {

const char* opcodeName(unsigned char op) {
    switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
    }
}

Value scalarNone() { return Value{}; }
Value scalarBool(bool b) {
    Value v;
    v.kind = Kind::Bool;
    v.b = b;
    return v;
}
Value scalarInt(std::int64_t i) {
    Value v;
    v.kind = Kind::Int;
    v.i = i;
    return v;
}
Value scalarFloat(double f) {
    Value v;
    v.kind = Kind::Float;
    v.f = f;
    return v;
}

void appendUtf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

int hexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class Machine {
public:
    Machine(std::string_view data, const Limits& limits) : data_(data), limits_(limits) {}

    Document run() {
        while (true) {
            if (pos_ >= data_.size()) fail("the pickle ends without a STOP opcode", pos_);
            opStart_ = pos_;
            op_ = static_cast<unsigned char>(data_[pos_++]);
            if (!opcodeName(op_)) {
                char buf[64];
                std::snprintf(buf, sizeof buf, "unknown opcode 0x%02x", op_);
                fail(buf, opStart_);
            }
            if (op_ == '.') break;
            step();
        }
        if (stack_.empty()) error("STOP with nothing on the stack");
        doc_.root = stack_.back();
        return std::move(doc_);
    }

private:
    std::string_view data_;
    Limits limits_;
    std::size_t pos_ = 0, opStart_ = 0;
    unsigned char op_ = 0;
    Document doc_;
    std::vector<Value> stack_;
    std::vector<std::size_t> marks_;
    std::unordered_map<std::uint64_t, Value> memo_;
    std::size_t bytes_ = 0, items_ = 0;

    void countItems(std::size_t n) {
        items_ += n;
        if (items_ > limits_.maxItems) error("more than " + std::to_string(limits_.maxItems) + " values in containers");
    }

    [[noreturn]] void fail(const std::string& msg, std::size_t at) const {
        throw PickleError("byte " + std::to_string(at) + ": " + msg);
    }
    [[noreturn]] void error(const std::string& msg) const {
        throw PickleError("byte " + std::to_string(opStart_) + ", opcode " + opcodeName(op_) + ": " + msg);
    }

    // ----- input
    std::string_view take(std::uint64_t n) {
        if (n > data_.size() - pos_)
            throw PickleError("byte " + std::to_string(opStart_) + ", opcode " + opcodeName(op_) + ": the pickle is truncated (needs " +
                              std::to_string(n) + " bytes, " + std::to_string(data_.size() - pos_) + " left)");
        auto s = data_.substr(pos_, static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n);
        return s;
    }
    std::uint64_t readUnsigned(int n) {
        auto s = take(static_cast<std::uint64_t>(n));
        std::uint64_t v = 0;
        for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(s[static_cast<std::size_t>(k)]);
        return v;
    }
    std::string_view readLine() {
        auto nl = data_.find('\n', pos_);
        if (nl == std::string_view::npos) error("the pickle is truncated (a text argument has no end of line)");
        auto s = data_.substr(pos_, nl - pos_);
        pos_ = nl + 1;
        return s;
    }
    std::uint64_t length(std::uint64_t n) {
        if (n > data_.size() - pos_)
            error("a length of " + std::to_string(n) + " bytes runs past the end of the pickle (" + std::to_string(data_.size() - pos_) + " left)");
        return n;
    }

    // ----- nodes and stack
    Value newNode(Kind k) {
        if (doc_.nodes.size() >= limits_.maxNodes) error("more than " + std::to_string(limits_.maxNodes) + " objects");
        doc_.nodes.emplace_back();
        doc_.nodes.back().kind = k;
        Value v;
        v.kind = k;
        v.node = static_cast<NodeId>(doc_.nodes.size() - 1);
        return v;
    }
    Node& nodeOf(const Value& v) { return doc_.nodes[v.node]; }
    Value text(Kind k, std::string_view s) {
        bytes_ += s.size();
        if (bytes_ > limits_.maxBytes) error("more than " + std::to_string(limits_.maxBytes) + " bytes of strings");
        auto v = newNode(k);
        nodeOf(v).text.assign(s.data(), s.size());
        return v;
    }
    void push(const Value& v) {
        if (stack_.size() >= limits_.maxStack) error("the stack grows past " + std::to_string(limits_.maxStack) + " values");
        stack_.push_back(v);
    }
    Value pop() {
        if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) error("the stack is empty");
        auto v = stack_.back();
        stack_.pop_back();
        return v;
    }
    Value& top() {
        if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) error("the stack is empty");
        return stack_.back();
    }
    std::vector<Value> popMark() {
        if (marks_.empty()) error("no MARK to pop to");
        auto at = marks_.back();
        marks_.pop_back();
        std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
        stack_.resize(at);
        return items;
    }
    Value tuple(std::vector<Value> items) {
        countItems(items.size());
        auto v = newNode(Kind::Tuple);
        nodeOf(v).items = std::move(items);
        return v;
    }
    Value global(std::string module, std::string name) {
        bytes_ += module.size() + name.size();
        if (bytes_ > limits_.maxBytes) error("more than " + std::to_string(limits_.maxBytes) + " bytes of strings");
        auto v = newNode(Kind::Global);
        nodeOf(v).text = std::move(module);
        nodeOf(v).name = std::move(name);
        return v;
    }
    Value instance(const Value& callable, const Value& args, bool newobj, const Value& kwargs = Value{}) {
        if (!callable.isNode() || (doc_.nodes[callable.node].kind != Kind::Global && doc_.nodes[callable.node].kind != Kind::Instance))
            error(std::string("calls a ") + toString(callable.kind) + ", not a class or function");
        if (args.kind != Kind::Tuple) error(std::string("the arguments are a ") + toString(args.kind) + ", not a tuple");
        auto v = newNode(Kind::Instance);
        auto& n = nodeOf(v);
        n.callable = callable;
        n.args = args;
        n.kwargs = kwargs;
        n.newobj = newobj;
        return v;
    }
    void memoPut(std::uint64_t key, const Value& v) {
        if (memo_.size() >= limits_.maxMemo && !memo_.count(key)) error("more than " + std::to_string(limits_.maxMemo) + " memo entries");
        memo_[key] = v;
    }
    Value memoGet(std::uint64_t key) {
        auto it = memo_.find(key);
        if (it == memo_.end()) error("memo entry " + std::to_string(key) + " is not defined");
        return it->second;
    }
    std::uint64_t lineNumber() {
        auto s = readLine();
        std::uint64_t v = 0;
        if (s.empty()) error("an empty number");
        for (char c : s) {
            if (c < '0' || c > '9') error("\"" + std::string(s.substr(0, 40)) + "\" is not a number");
            if (v > (UINT64_MAX - 9) / 10) error("a number out of range");
            v = v * 10 + static_cast<std::uint64_t>(c - '0');
        }
        return v;
    }
    /// A text integer: an Int when it fits in 64 bits, else a BigInt of its digits.
    Value textInt(std::string_view s) {
        if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
        std::string_view digits = s;
        if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
        if (digits.empty()) error("an empty number");
        for (char c : digits)
            if (c < '0' || c > '9') error("\"" + std::string(s.substr(0, 40)) + "\" is not an integer");
        std::size_t first = digits.find_first_not_of('0');
        if (first == std::string_view::npos) return scalarInt(0);
        const auto significant = digits.substr(first);
        if (significant.size() > 4096) error("an integer of more than 4096 digits");
        const bool neg = s[0] == '-';
        if (significant.size() <= 19) {  // below 10^19: fits in 64 unsigned bits
            std::uint64_t u = 0;
            for (char c : significant) u = u * 10 + static_cast<std::uint64_t>(c - '0');
            if (!neg && u <= static_cast<std::uint64_t>(INT64_MAX)) return scalarInt(static_cast<std::int64_t>(u));
            if (neg && u <= static_cast<std::uint64_t>(INT64_MAX) + 1) return scalarInt(static_cast<std::int64_t>(0 - u));
        }
        return text(Kind::BigInt, std::string(neg ? "-" : "") + std::string(significant));
    }
    std::int64_t signedLine(std::string_view s) {
        if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
        bool neg = !s.empty() && s[0] == '-';
        if (neg || (!s.empty() && s[0] == '+')) s.remove_prefix(1);
        if (s.empty()) error("an empty number");
        std::uint64_t v = 0;
        for (char c : s) {
            if (c < '0' || c > '9') error("\"" + std::string(s.substr(0, 40)) + "\" is not an integer");
            if (v > (static_cast<std::uint64_t>(INT64_MAX) + 1 - 9) / 10) error("an integer too large for 64 bits in a text opcode");
            v = v * 10 + static_cast<std::uint64_t>(c - '0');
        }
        if (!neg && v > static_cast<std::uint64_t>(INT64_MAX)) error("an integer too large for 64 bits in a text opcode");
        return neg ? static_cast<std::int64_t>(0 - v) : static_cast<std::int64_t>(v);
    }
    Value longBytes(std::string_view s) {
        // Drop redundant sign-extension bytes (0x00 before a byte < 0x80, 0xff before one >= 0x80).
        while (s.size() > 1) {
            const auto top = static_cast<unsigned char>(s.back()), next = static_cast<unsigned char>(s[s.size() - 2]);
            if ((top == 0x00 && next < 0x80) || (top == 0xff && next >= 0x80)) s.remove_suffix(1);
            else break;
        }
        if (s.size() <= 8) {
            std::uint64_t u = 0;
            for (std::size_t k = s.size(); k-- > 0;) u = (u << 8) | static_cast<unsigned char>(s[k]);
            if (!s.empty() && s.size() < 8 && (static_cast<unsigned char>(s.back()) & 0x80)) u |= ~std::uint64_t(0) << (8 * s.size());
            return scalarInt(static_cast<std::int64_t>(u));
        }
        // Two's complement, little-endian, to decimal digits (bounded: this is quadratic).
        if (s.size() > 1024) error("an integer of more than 1024 bytes");
        std::vector<unsigned char> mag(s.begin(), s.end());
        bool neg = mag.back() & 0x80;
        if (neg) {  // negate: invert and add one
            unsigned carry = 1;
            for (auto& b : mag) {
                unsigned x = static_cast<unsigned char>(~b) + carry;
                b = static_cast<unsigned char>(x);
                carry = x >> 8;
            }
        }
        std::string digits;
        while (true) {
            bool zero = true;
            unsigned rem = 0;
            for (std::size_t k = mag.size(); k-- > 0;) {
                unsigned cur = (rem << 8) | mag[k];
                mag[k] = static_cast<unsigned char>(cur / 10);
                rem = cur % 10;
                zero = zero && mag[k] == 0;
            }
            digits += static_cast<char>('0' + rem);
            if (zero) break;
        }
        if (neg) digits += '-';
        return text(Kind::BigInt, std::string(digits.rbegin(), digits.rend()));
    }
    std::string quoted(std::string_view s) {
        if (s.size() < 2 || (s.front() != '\'' && s.front() != '"') || s.back() != s.front()) error("a STRING argument is not quoted");
        s = s.substr(1, s.size() - 2);
        std::string out;
        for (std::size_t k = 0; k < s.size(); ++k) {
            if (s[k] != '\\' || k + 1 >= s.size()) {
                out += s[k];
                continue;
            }
            char c = s[++k];
            switch (c) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'x': {
                int hi = k + 1 < s.size() ? hexDigit(s[k + 1]) : -1, lo = k + 2 < s.size() ? hexDigit(s[k + 2]) : -1;
                if (hi < 0 || lo < 0) error("a bad \\x escape in a STRING argument");
                out += static_cast<char>(hi * 16 + lo);
                k += 2;
                break;
            }
            default: out += c;
            }
        }
        return out;
    }
    std::string rawUnicode(std::string_view s) {
        std::string out;
        for (std::size_t k = 0; k < s.size(); ++k) {
            if (s[k] == '\\' && k + 1 < s.size() && (s[k + 1] == 'u' || s[k + 1] == 'U')) {
                int n = s[k + 1] == 'u' ? 4 : 8;
                if (k + 2 + static_cast<std::size_t>(n) > s.size()) error("a bad \\u escape");
                std::uint32_t cp = 0;
                for (int d = 0; d < n; ++d) {
                    int h = hexDigit(s[k + 2 + static_cast<std::size_t>(d)]);
                    if (h < 0) error("a bad \\u escape");
                    cp = cp * 16 + static_cast<std::uint32_t>(h);
                }
                if (cp > 0x10FFFF) error("a code point out of range");
                appendUtf8(out, cp);
                k += 1 + static_cast<std::size_t>(n);
            } else {
                appendUtf8(out, static_cast<unsigned char>(s[k]));  // latin-1
            }
        }
        return out;
    }

    // ----- mutations
    void appendTo(const Value& target, std::vector<Value> items) {
        if (!target.isNode()) error(std::string("appends to a ") + toString(target.kind));
        auto& n = nodeOf(target);
        if (n.kind != Kind::List && n.kind != Kind::Instance) error(std::string("appends to a ") + toString(n.kind));
        countItems(items.size());
        for (auto& v : items) n.items.push_back(v);
    }
    void setItems(const Value& target, std::vector<Value> kv) {
        if (kv.size() % 2) error("an odd number of values for key/value pairs");
        if (!target.isNode()) error(std::string("sets items of a ") + toString(target.kind));
        auto& n = nodeOf(target);
        if (n.kind != Kind::Dict && n.kind != Kind::Instance) error(std::string("sets items of a ") + toString(n.kind));
        countItems(kv.size());
        for (std::size_t k = 0; k < kv.size(); k += 2) n.entries.emplace_back(kv[k], kv[k + 1]);
    }
    void addItems(const Value& target, std::vector<Value> items) {
        if (!target.isNode()) error(std::string("adds items to a ") + toString(target.kind));
        auto& n = nodeOf(target);
        if (n.kind != Kind::Set && n.kind != Kind::Instance) error(std::string("adds items to a ") + toString(n.kind));
        countItems(items.size());
        for (auto& v : items) n.items.push_back(v);
    }

    void step() {
        switch (op_) {
        case 0x80: {  // PROTO
            auto p = readUnsigned(1);
            if (p > 5) error("protocol " + std::to_string(p) + " is newer than 5");
            doc_.protocol = static_cast<int>(p);
            break;
        }
        case 0x95: length(readUnsigned(8)); break;  // FRAME: the frame's bytes follow in the stream
        case '(':
            if (marks_.size() >= limits_.maxMarks) error("more than " + std::to_string(limits_.maxMarks) + " nested marks");
            marks_.push_back(stack_.size());
            break;
        case '0':  // on an empty frame, POP drops the mark (as Python's unpickler does)
            if (!marks_.empty() && stack_.size() == marks_.back()) popMark();
            else pop();
            break;
        case '1': popMark(); break;
        case '2': {
            auto v = top();
            push(v);
            break;
        }
        case 'N': push(scalarNone()); break;
        case 0x88: push(scalarBool(true)); break;
        case 0x89: push(scalarBool(false)); break;
        case 'J': push(scalarInt(static_cast<std::int32_t>(static_cast<std::uint32_t>(readUnsigned(4))))); break;
        case 'K': push(scalarInt(static_cast<std::int64_t>(readUnsigned(1)))); break;
        case 'M': push(scalarInt(static_cast<std::int64_t>(readUnsigned(2)))); break;
        case 'I': {
            auto s = readLine();
            if (s == "00") push(scalarBool(false));
            else if (s == "01") push(scalarBool(true));
            else push(textInt(s));
            break;
        }
        case 'L': push(textInt(readLine())); break;
        case 0x8a: push(longBytes(take(length(readUnsigned(1))))); break;
        case 0x8b: {
            auto n = readUnsigned(4);
            if (n > 0x7fffffff) error("a negative length");
            push(longBytes(take(length(n))));
            break;
        }
        case 'F': {
            auto s = std::string(readLine());
            char* end = nullptr;
            double d = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size()) error("\"" + s.substr(0, 40) + "\" is not a float");
            push(scalarFloat(d));
            break;
        }
        case 'G': {
            auto s = take(8);
            std::uint64_t u = 0;
            for (char c : s) u = (u << 8) | static_cast<unsigned char>(c);
            double d;
            std::memcpy(&d, &u, sizeof d);
            push(scalarFloat(d));
            break;
        }
        case 'S': push(text(Kind::String, quoted(readLine()))); break;
        case 'T': {
            auto n = readUnsigned(4);
            if (n > 0x7fffffff) error("a negative length");
            push(text(Kind::String, take(length(n))));
            break;
        }
        case 'U': push(text(Kind::String, take(length(readUnsigned(1))))); break;
        case 'V': push(text(Kind::String, rawUnicode(readLine()))); break;
        case 'X': push(text(Kind::String, take(length(readUnsigned(4))))); break;
        case 0x8c: push(text(Kind::String, take(length(readUnsigned(1))))); break;
        case 0x8d: push(text(Kind::String, take(length(readUnsigned(8))))); break;
        case 'B': push(text(Kind::Bytes, take(length(readUnsigned(4))))); break;
        case 'C': push(text(Kind::Bytes, take(length(readUnsigned(1))))); break;
        case 0x8e: push(text(Kind::Bytes, take(length(readUnsigned(8))))); break;
        case 0x96: push(text(Kind::Bytes, take(length(readUnsigned(8))))); break;
        case 0x97:
        case 0x98: error("out-of-band buffers (protocol 5) are not part of the file");
        case ')': push(tuple({})); break;
        case 0x85: {
            auto a = pop();
            push(tuple({a}));
            break;
        }
        case 0x86: {
            auto b = pop(), a = pop();
            push(tuple({a, b}));
            break;
        }
        case 0x87: {
            auto c = pop(), b = pop(), a = pop();
            push(tuple({a, b, c}));
            break;
        }
        case 't': push(tuple(popMark())); break;
        case ']': push(newNode(Kind::List)); break;
        case 'l': {
            auto items = popMark();
            countItems(items.size());
            auto v = newNode(Kind::List);
            nodeOf(v).items = std::move(items);
            push(v);
            break;
        }
        case '}': push(newNode(Kind::Dict)); break;
        case 'd': {
            auto items = popMark();
            auto v = newNode(Kind::Dict);
            push(v);
            setItems(v, std::move(items));
            break;
        }
        case 0x8f: push(newNode(Kind::Set)); break;
        case 0x91: {
            auto items = popMark();
            countItems(items.size());
            auto v = newNode(Kind::FrozenSet);
            nodeOf(v).items = std::move(items);
            push(v);
            break;
        }
        case 'a': {
            auto v = pop();
            appendTo(top(), {v});
            break;
        }
        case 'e': {
            auto items = popMark();
            appendTo(top(), std::move(items));
            break;
        }
        case 's': {
            auto value = pop(), key = pop();
            setItems(top(), {key, value});
            break;
        }
        case 'u': {
            auto items = popMark();
            setItems(top(), std::move(items));
            break;
        }
        case 0x90: {
            auto items = popMark();
            addItems(top(), std::move(items));
            break;
        }
        case 'g': push(memoGet(lineNumber())); break;
        case 'h': push(memoGet(readUnsigned(1))); break;
        case 'j': push(memoGet(readUnsigned(4))); break;
        case 'p': memoPut(lineNumber(), top()); break;
        case 'q': memoPut(readUnsigned(1), top()); break;
        case 'r': memoPut(readUnsigned(4), top()); break;
        case 0x94: memoPut(memo_.size(), top()); break;
        case 'c': {
            auto module = std::string(readLine());
            auto name = std::string(readLine());
            push(global(std::move(module), std::move(name)));
            break;
        }
        case 0x93: {
            auto name = pop(), module = pop();
            if (module.kind != Kind::String || name.kind != Kind::String) error("STACK_GLOBAL needs two strings");
            push(global(nodeOf(module).text, nodeOf(name).text));
            break;
        }
        case 0x82:
        case 0x83:
        case 0x84: {
            auto code = readUnsigned(op_ == 0x82 ? 1 : op_ == 0x83 ? 2 : 4);
            push(global("copyreg", "extension " + std::to_string(code)));
            break;
        }
        case 'P': {
            auto pid = text(Kind::String, readLine());
            push(instance(global("pickle", "persistent_load"), tuple({pid}), false));
            break;
        }
        case 'Q': {
            auto pid = pop();
            push(instance(global("pickle", "persistent_load"), tuple({pid}), false));
            break;
        }
        case 'R': {
            auto args = pop(), callable = pop();
            push(instance(callable, args, false));
            break;
        }
        case 0x81: {
            auto args = pop(), cls = pop();
            push(instance(cls, args, true));
            break;
        }
        case 0x92: {
            auto kwargs = pop(), args = pop(), cls = pop();
            if (kwargs.kind != Kind::Dict) error(std::string("the keyword arguments are a ") + toString(kwargs.kind) + ", not a dict");
            push(instance(cls, args, true, kwargs));
            break;
        }
        case 'o': {
            auto items = popMark();
            if (items.empty()) error("OBJ needs a class");
            auto cls = items.front();
            items.erase(items.begin());
            push(instance(cls, tuple(std::move(items)), false));
            break;
        }
        case 'i': {
            auto module = std::string(readLine());
            auto name = std::string(readLine());
            auto items = popMark();
            push(instance(global(std::move(module), std::move(name)), tuple(std::move(items)), false));
            break;
        }
        case 'b': {
            auto state = pop();
            auto& target = top();
            if (!target.isNode() || (nodeOf(target).kind != Kind::Instance && nodeOf(target).kind != Kind::Global))
                error(std::string("BUILD on a ") + toString(target.kind) + ", which has no state");
            const auto targetNode = target.node;
            const auto old = doc_.nodes[targetNode].state;
            if (doc_.nodes[targetNode].hasState && old.kind == Kind::Dict && state.kind == Kind::Dict) {
                // A second BUILD updates the instance's dict as Python does: later keys replace
                // earlier ones. Into a new dict: the old one may be shared (memo) or be `state`.
                auto merged = newNode(Kind::Dict);
                auto entries = doc_.nodes[old.node].entries;
                auto sameKey = [&](const Value& a, const Value& b) {
                    if (a.kind != b.kind) return false;
                    switch (a.kind) {
                    case Kind::None: return true;
                    case Kind::Bool: return a.b == b.b;
                    case Kind::Int: return a.i == b.i;
                    case Kind::Float: return a.f == b.f;
                    case Kind::String:
                    case Kind::Bytes:
                    case Kind::BigInt: return doc_.nodes[a.node].text == doc_.nodes[b.node].text;
                    default: return a.node == b.node;
                    }
                };
                for (const auto& [k, v] : doc_.nodes[state.node].entries) {
                    bool replaced = false;
                    for (auto& e : entries)
                        if (sameKey(e.first, k)) {
                            e.second = v;
                            replaced = true;
                            break;
                        }
                    if (!replaced) entries.emplace_back(k, v);
                }
                countItems(2 * entries.size());
                doc_.nodes[merged.node].entries = std::move(entries);
                doc_.nodes[targetNode].state = merged;
            } else {
                doc_.nodes[targetNode].state = state;
                doc_.nodes[targetNode].hasState = true;
            }
            break;
        }
        default: error("unhandled opcode");
        }
    }
};

}  // namespace

// ----- document

const Node& Document::node(const Value& v) const {
    if (!v.isNode() || v.node >= nodes.size()) throw PickleError(std::string("a ") + toString(v.kind) + " is not an object");
    return nodes[v.node];
}

const Node* Document::as(const Value& v, Kind k) const {
    if (v.kind != k || !v.isNode() || v.node >= nodes.size()) return nullptr;
    return &nodes[v.node];
}

std::string Document::className(const Value& v) const {
    if (auto* g = as(v, Kind::Global)) return g->text + "." + g->name;
    if (auto* i = as(v, Kind::Instance))
        if (auto* g = as(i->callable, Kind::Global)) return g->text + "." + g->name;
    return "";
}

const Value* Document::dictGet(const Value& dict, std::string_view key) const {
    auto* d = as(dict, Kind::Dict);
    if (!d) return nullptr;
    for (const auto& [k, v] : d->entries)
        if (auto* s = str(k); s && *s == key) return &v;
    return nullptr;
}

const Value* Document::attr(const Value& v, std::string_view key) const {
    const Node* n = as(v, Kind::Instance);
    if (!n) n = as(v, Kind::Global);
    if (!n || !n->hasState) return nullptr;
    if (auto* found = dictGet(n->state, key)) return found;
    // (state, slotstate) tuples: look in both dicts.
    if (auto* t = as(n->state, Kind::Tuple))
        for (const auto& part : t->items)
            if (auto* found = dictGet(part, key)) return found;
    return nullptr;
}

const std::string* Document::str(const Value& v) const {
    auto* n = as(v, Kind::String);
    return n ? &n->text : nullptr;
}

std::string Document::describe(const Value& v, int depth) const {
    constexpr std::size_t kMax = 256;
    auto clip = [&](std::string s) {
        if (s.size() > kMax) {
            // (resize and append rather than substr + "...": GCC 12 warns falsely, -Warray-bounds, on the latter)
            s.resize(kMax - 3);
            s += "...";
        }
        return s;
    };
    switch (v.kind) {
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: {
        std::ostringstream o;
        o << v.f;
        return o.str();
    }
    default: break;
    }
    if (!v.isNode() || v.node >= nodes.size()) return "?";
    const auto& n = nodes[v.node];
    switch (n.kind) {
    case Kind::String: {
        std::string s = "'";
        for (char c : n.text) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
                s += buf;
            } else {
                s += c;
            }
            if (s.size() > kMax) break;
        }
        return clip(s + "'");
    }
    case Kind::Bytes: return "<" + std::to_string(n.text.size()) + " bytes>";
    case Kind::BigInt: return clip(n.text);
    case Kind::Global: return n.text + "." + n.name;
    default: break;
    }
    if (depth <= 0) return "...";
    auto list = [&](const std::vector<Value>& items, const char* open, const char* close) {
        std::string s = open;
        for (std::size_t k = 0; k < items.size(); ++k) {
            if (k) s += ", ";
            if (s.size() > kMax) return clip(s + "...");
            s += describe(items[k], depth - 1);
        }
        return clip(s + close);
    };
    switch (n.kind) {
    case Kind::Tuple: return list(n.items, "(", ")");
    case Kind::List: return list(n.items, "[", "]");
    case Kind::Set:
    case Kind::FrozenSet: return list(n.items, "{", "}");
    case Kind::Dict: {
        std::string s = "{";
        for (std::size_t k = 0; k < n.entries.size(); ++k) {
            if (k) s += ", ";
            if (s.size() > kMax) return clip(s + "...");
            s += describe(n.entries[k].first, depth - 1) + ": " + describe(n.entries[k].second, depth - 1);
        }
        return clip(s + "}");
    }
    case Kind::Instance: {
        std::string s = describe(n.callable, depth - 1) + describe(n.args, depth - 1);
        if (!n.items.empty()) s += " + " + list(n.items, "[", "]");
        if (!n.entries.empty()) {
            s += " + {";
            for (std::size_t k = 0; k < n.entries.size() && s.size() <= kMax; ++k)
                s += (k ? ", " : "") + describe(n.entries[k].first, depth - 1) + ": " + describe(n.entries[k].second, depth - 1);
            s += "}";
        }
        if (n.hasState) s += " with " + describe(n.state, depth - 1);
        return clip(s);
    }
    default: return "?";
    }
}

std::map<std::string, std::size_t> Document::classCounts() const {
    std::map<std::string, std::size_t> counts;
    for (std::size_t k = 0; k < nodes.size(); ++k) {
        if (nodes[k].kind != Kind::Instance) continue;
        Value v;
        v.kind = Kind::Instance;
        v.node = static_cast<NodeId>(k);
        auto name = className(v);
        ++counts[name.empty() ? "(the result of a call)" : name];
    }
    return counts;
}

Document read(std::string_view data, const Limits& limits) { return Machine(data, limits).run(); }

Document readFile(const std::string& path, const Limits& limits) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw PickleError("cannot open " + path);
    in.seekg(0, std::ios::end);
    auto size = static_cast<std::streamoff>(in.tellg());
    if (size < 0) throw PickleError("cannot read " + path);
    if (static_cast<std::uint64_t>(size) > limits.maxBytes) throw PickleError(path + " is larger than " + std::to_string(limits.maxBytes) + " bytes");
    in.seekg(0);
    std::string data(static_cast<std::size_t>(size), '\0');
    if (!in.read(data.data(), size)) throw PickleError("cannot read " + path);
    return read(data, limits);
}

std::string validUtf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        bool ok = len > 0 && i + len <= s.size();
        for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
        if (ok && len > 1) {
            std::uint32_t cp = c & (0xFF >> (len + 1));
            for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            // overlong forms, surrogates and values past U+10FFFF are not UTF-8
            ok = !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) && !(len == 4 && cp < 0x10000) && !(cp >= 0xD800 && cp <= 0xDFFF) &&
                 cp <= 0x10FFFF;
        }
        if (ok) {
            out.append(s.substr(i, len));
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

bool looksLikePickle(std::string_view data) {
    if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x80) return static_cast<unsigned char>(data[1]) >= 2 && static_cast<unsigned char>(data[1]) <= 5;
    return !data.empty() && (data[0] == '(' || data[0] == ']' || data[0] == '}' || data[0] == 'c');
}

}  // namespace tv::pickle
