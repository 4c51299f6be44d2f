// The main of a test that verifies in solver processes: its own executable serves them
// (`--solver-process FD`, verify/solver_process.hpp), as trainverify and trainverify-studio do.
// Use: #define main qtestMain / QTEST_MAIN(T) / #undef main / TV_SOLVER_PROCESS_MAIN(qtestMain)
#pragma once

#include <cstdlib>
#include <cstring>

#include "verify/solver_process.hpp"

#define TV_SOLVER_PROCESS_MAIN(inner)                                                                          \
    int main(int argc, char** argv) {                                                                          \
        if (argc == 3 && std::strcmp(argv[1], "--solver-process") == 0) return tv::solverProcessMain(std::atoi(argv[2])); \
        return inner(argc, argv);                                                                              \
    }
