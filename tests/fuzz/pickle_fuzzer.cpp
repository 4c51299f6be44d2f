// libFuzzer target for the safe pickle reader: any input must be read or refused with a
// PickleError; a crash, a sanitizer report, a hang or another exception is a finding.
// Built and run by tests/fuzz/run_fuzzer.sh pickle (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pickle/pickle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    tv::pickle::Limits limits;
    limits.maxNodes = std::size_t(1) << 20;  // keep each input's memory small for the fuzzer
    limits.maxBytes = std::size_t(1) << 26;
    limits.maxStack = std::size_t(1) << 20;
    limits.maxMemo = std::size_t(1) << 20;
    try {
        auto doc = tv::pickle::read(std::string_view(reinterpret_cast<const char*>(data), size), limits);
        // Walk what was built, as the nnScaler mapping will.
        (void)doc.describe(doc.root, 6);
        (void)doc.classCounts();
        (void)doc.attr(doc.root, "execplan");
    } catch (const tv::pickle::PickleError&) {
    }
    return 0;
}
