// The main of a test whose work runs in helper processes: its own executable serves them
// (`--solver-process FD`, verify/solver_process.hpp; `--layout-process FD`,
// layout/layout_process.hpp), as trainverify-studio does.
// Use: #define main qtestMain / QTEST_MAIN(T) / #undef main / TV_HELPER_PROCESS_MAIN(qtestMain)
#pragma once

#include <cstdlib>
#include <cstring>

#include "layout/layout_process.hpp"
#include "verify/solver_process.hpp"

#define TV_HELPER_PROCESS_MAIN(inner)                                                                          \
    int main(int argc, char** argv) {                                                                          \
        if (argc == 3 && std::strcmp(argv[1], "--solver-process") == 0) return tv::solverProcessMain(std::atoi(argv[2])); \
        if (argc == 3 && std::strcmp(argv[1], "--layout-process") == 0) return tv::layoutProcessMain(std::atoi(argv[2])); \
        return inner(argc, argv);                                                                              \
    }
