#include "model/text.hpp"

#include <cstdio>

namespace tv {

std::string printable(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out;
}

bool hasControlCharacter(std::string_view s) {
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) return true;
    }
    return false;
}

namespace {
/// The longest prefix of s of at most n bytes that does not cut a UTF-8 sequence.
std::size_t utf8Prefix(std::string_view s, std::size_t n) {
    if (n >= s.size()) return s.size();
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return n;
}
}  // namespace

std::string shortened(std::string_view s, std::size_t max) {
    if (s.size() <= max || max < 16) return std::string(s);
    const std::size_t head = utf8Prefix(s, max * 2 / 3);
    std::size_t tailStart = s.size() - (max - max * 2 / 3);
    while (tailStart < s.size() && (static_cast<unsigned char>(s[tailStart]) & 0xC0) == 0x80) ++tailStart;
    return std::string(s.substr(0, head)) + "…" + std::string(s.substr(tailStart)) + " (" + std::to_string(s.size()) + " bytes)";
}

std::string printableMessage(std::string_view message, std::size_t max) {
    std::string out;
    std::size_t i = 0;
    while (i < message.size()) {
        const auto open = message.find('"', i);
        if (open == std::string_view::npos) {
            out += message.substr(i);
            break;
        }
        const auto close = message.find('"', open + 1);
        if (close == std::string_view::npos) {
            out += message.substr(i);
            break;
        }
        out += message.substr(i, open + 1 - i);
        out += shortened(message.substr(open + 1, close - open - 1), max);
        out += '"';
        i = close + 1;
    }
    return printable(out);
}

}  // namespace tv
