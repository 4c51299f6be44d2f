// Text that reaches a terminal or a message from a plan file: control characters escaped, and
// strings too long to read shortened. A name with an ESC or BEL sequence must not drive the
// user's terminal, and a 100 KB id must not fill the screen.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tv {

/// `s` with every control character but newline and tab (bytes below 0x20, and 0x7f) written as
/// \xNN; other bytes (UTF-8 included) unchanged.
std::string printable(std::string_view s);

/// Whether `s` holds a control character (any byte below 0x20, or 0x7f).
bool hasControlCharacter(std::string_view s);

/// `s` if it has at most `max` bytes; else its start and end around "…" and its length in bytes.
std::string shortened(std::string_view s, std::size_t max = 120);

/// A message with every quoted span ("...") longer than `max` bytes shortened, then made
/// printable.
std::string printableMessage(std::string_view message, std::size_t max = 120);

}  // namespace tv
