// The commands of `trainverify`, one file each (app/cli/*_command.cpp), all over one argument
// parser (cli/arguments.hpp) and the session layer (core/session). Each takes the arguments after
// its name and returns the process's exit code.
#pragma once

#include <string>
#include <vector>

namespace tv::cli {

using Args = std::vector<std::string>;

int verifyCommand(const Args& args);
int inspectCommand(const Args& args);
int generateCommand(const Args& args);
int convertCommand(const Args& args);
int mutateCommand(const Args& args);
int oracleCommand(const Args& args);
int opsCommand(const Args& args);

}  // namespace tv::cli
