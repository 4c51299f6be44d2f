// The command line's one argument parser, and what every command shares: the usage error, writing
// an output file or standard output, whole numbers. Each command declares its options once (name,
// whether it takes a value, what it needs, what it sets); the arguments are read left to right in
// one pass. An option's value is the next argument, whatever it looks like ("--json -").
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace tv::cli {

/// Prints "trainverify: MSG" and the pointer to --help on standard error; returns 3 (usage).
int usageError(const std::string& msg);

/// Writes `text` to `path` ("-": standard output); says why on standard error when it cannot.
bool writeOutput(const std::string& path, const std::string& text);

/// Whether the file starts as a Python pickle does (an nnScaler plan given where a plan file goes).
bool isPickleFile(const std::string& path);
/// After a plan file was refused: if it is a pickle, how this command reads an nnScaler pair.
void printPickleHint(const std::string& path, const std::string& command, std::FILE* to);

/// A whole number written with digits only (at most 12 of them).
bool parseCount(const std::string& text, std::int64_t& out);
/// A number from 0 up to (not including) 10 million, decimals allowed (seconds, MiB).
bool parseNumber(const std::string& text, double& out);

class Arguments {
public:
    /// Sets what the option stands for from its value (empty for a flag); returns the problem, or
    /// an empty string.
    using Apply = std::function<std::string(const std::string& value)>;

    explicit Arguments(std::string command) : command_(std::move(command)) {}

    /// A flag: `--name` sets `*out`.
    Arguments& flag(std::initializer_list<std::string_view> names, bool* out);
    /// A flag with its own effect.
    Arguments& flag(std::initializer_list<std::string_view> names, std::function<void()> apply);
    /// `--name VALUE` into `*out`; `need` is the message when the value is missing (or is "-"
    /// where standard output is no place for it: !dashAllowed).
    Arguments& text(std::initializer_list<std::string_view> names, std::string* out, std::string need, bool dashAllowed = true);
    /// `--name VALUE...`: one or more values (up to the next option) appended to `*out`, and the
    /// option may be given again.
    Arguments& list(std::initializer_list<std::string_view> names, std::vector<std::string>* out, std::string need);
    /// `--name VALUE` read by `apply`; `need` is the message when the value is missing.
    Arguments& value(std::initializer_list<std::string_view> names, std::string need, Apply apply);
    /// `--name N`: a whole number from `min` to `max`. Not a number: `notANumber` (default
    /// "--name needs a whole number"); out of range: `range` (default "--name must be from MIN to
    /// MAX").
    Arguments& count(std::initializer_list<std::string_view> names, std::int64_t min, std::int64_t max, std::function<void(std::int64_t)> set,
                     std::string range = {}, std::string notANumber = {});
    /// The one plan file the command takes ("-" counts as one); `tooMany` when there are two.
    /// Without it, the command takes none.
    Arguments& positional(std::string* out, std::string tooMany);

    /// Reads `args`: the first problem ("verify: unknown option --fast", a missing value, a bad
    /// number...), or an empty string.
    std::string parse(const std::vector<std::string>& args) const;

private:
    struct Option {
        std::vector<std::string> names;
        bool takesValue = false;
        std::string need;
        Apply apply;
        bool many = false;  ///< takes every value up to the next option
    };
    const Option* find(const std::string& name) const;

    std::string command_;
    std::vector<Option> options_;
    std::string* positional_ = nullptr;
    std::string tooMany_;
};

}  // namespace tv::cli
