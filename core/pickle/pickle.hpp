// A safe reader for Python pickles (protocols 0 to 5, and the dill extensions nnScaler's plans
// use). It never executes or imports anything: it runs the pickle machine over a neutral object
// tree. A global becomes a named reference, a call (REDUCE, NEWOBJ, OBJ, INST) becomes an
// instance holding what was called and with what, BUILD attaches the state, and appends and set
// items on an instance are kept with it. Memory is bounded (nodes, memo, stack, bytes), the
// machine is iterative (no recursion on the input), and a truncated, corrupt or hostile file gives
// a PickleError naming the byte offset and the opcode.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tv::pickle {

class PickleError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class Kind : std::uint8_t {
    None,
    Bool,
    Int,       ///< fits in 64 bits
    BigInt,    ///< does not: its decimal digits (Node::text, with a leading '-' if negative)
    Float,
    String,    ///< UTF-8, as pickled
    Bytes,     ///< bytes and bytearray; torch storages stay here
    Tuple,
    List,
    Dict,
    Set,
    FrozenSet,
    Global,    ///< a reference to module.name, never resolved
    Instance,  ///< the result of calling something: callable, args, kwargs, then state and items
};

const char* toString(Kind k);

using NodeId = std::uint32_t;

/// A value: scalars inline, everything else a node of the document (shared, possibly cyclic).
struct Value {
    Kind kind = Kind::None;
    bool b = false;
    std::int64_t i = 0;
    double f = 0;
    NodeId node = 0;
    bool isNode() const { return kind >= Kind::BigInt && kind != Kind::Float; }
};

struct Node {
    Kind kind = Kind::None;
    std::string text;    ///< String, Bytes, BigInt; Global: the module
    std::string name;    ///< Global: the qualified name
    std::vector<Value> items;                        ///< Tuple, List, Set, FrozenSet; Instance: appended
    std::vector<std::pair<Value, Value>> entries;   ///< Dict; Instance: set items
    Value callable, args, kwargs;                   ///< Instance
    Value state;                                     ///< Instance (or Global) after BUILD
    bool hasState = false;
    bool newobj = false;  ///< Instance made by NEWOBJ (cls.__new__), not by a call
};

/// Limits on what one pickle may build.
struct Limits {
    std::size_t maxNodes = std::size_t(1) << 22;      ///< objects (a node is a few hundred bytes)
    std::size_t maxItems = std::size_t(1) << 24;      ///< values held in lists, tuples, sets and dicts, all told
    std::size_t maxBytes = std::size_t(1) << 30;     ///< total of strings and bytes
    std::size_t maxStack = std::size_t(1) << 22;     ///< values on the stack and under marks
    std::size_t maxMemo = std::size_t(1) << 22;
    std::size_t maxMarks = std::size_t(1) << 16;     ///< nested marks
};

class Document {
public:
    Value root;
    std::vector<Node> nodes;
    int protocol = 0;

    const Node& node(const Value& v) const;
    /// The node of v if it has that kind, else null.
    const Node* as(const Value& v, Kind k) const;
    /// "module.name" of a Global, or of an Instance's callable when that is a Global ("" otherwise).
    std::string className(const Value& v) const;
    /// An Instance's or a Global's state dict entry (after BUILD) by string key; null if none.
    const Value* attr(const Value& v, std::string_view key) const;
    /// A Dict's entry by string key; null if none.
    const Value* dictGet(const Value& dict, std::string_view key) const;
    /// The string of a String value, or null.
    const std::string* str(const Value& v) const;
    /// A short, bounded text form for messages and inspection (depth and length limited; cycles
    /// print as "...").
    std::string describe(const Value& v, int depth = 2) const;
    /// How many instances of each class (or callable) the document holds.
    std::map<std::string, std::size_t> classCounts() const;
};

/// Reads a pickle. Throws PickleError.
Document read(std::string_view data, const Limits& limits = {});
/// Reads a pickle file. Throws PickleError (also when the file cannot be read).
Document readFile(const std::string& path, const Limits& limits = {});

/// The string with every byte sequence that is not UTF-8 replaced by U+FFFD: pickled strings are
/// not checked, and JSON output must be valid UTF-8.
std::string validUtf8(std::string_view s);

/// True when the data starts like a pickle (PROTO 2-5, or a protocol 0/1 opcode we know).
bool looksLikePickle(std::string_view data);

}  // namespace tv::pickle
