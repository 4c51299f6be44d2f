// Guided lessons: a correct plan and a buggy twin for one parallelism strategy, with an
// explanation for someone learning it. Listed in resources/lessons/lessons.json; each plan's own
// expect block states its verdict (the single source of truth for it).
#pragma once

#include <string>
#include <vector>

#include "model/problem.hpp"

namespace tv {

struct Lesson {
    std::string id, title, strategy;
    std::string correct, buggy;   ///< plan files, resolved against the lessons directory
    std::string bug;              ///< the bug catalog entry the twin was made with (empty: hand-made)
    std::string explanation;      ///< simple HTML
};

struct LessonList {
    std::vector<Lesson> lessons;
    /// What is wrong with the manifest, each where (the file and JSON path, "lessons.json: /lessons/2/buggy") and why.
    std::vector<PlanProblem> problems;
    bool ok() const { return problems.empty(); }
};

/// Reads `dir`/lessons.json. Lessons with a problem (a missing field, a plan file that does not
/// exist) are left out and the problem is reported; the others load.
LessonList loadLessons(const std::string& dir);

}  // namespace tv
