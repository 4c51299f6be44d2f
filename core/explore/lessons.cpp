#include "explore/lessons.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tv {

LessonList loadLessons(const std::string& dir) {
    LessonList out;
    const auto manifest = std::filesystem::path(dir) / "lessons.json";
    const std::string where = manifest.string();
    std::ifstream in(manifest);
    if (!in) {
        out.problems.push_back({where, "cannot be read"});
        return out;
    }
    nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) {
        out.problems.push_back({where, "not a JSON object"});
        return out;
    }
    if (!doc.contains("format") || !doc["format"].is_string() || doc["format"].get<std::string>() != "trainverify-lessons" ||
        !doc.contains("version") || !doc["version"].is_number_integer() || doc["version"].get<int>() != 1) {
        out.problems.push_back({where, "/format and /version must be \"trainverify-lessons\" and 1"});
        return out;
    }
    if (!doc.contains("lessons") || !doc["lessons"].is_array()) {
        out.problems.push_back({where, "/lessons must be an array"});
        return out;
    }
    for (std::size_t i = 0; i < doc["lessons"].size(); ++i) {
        const auto& l = doc["lessons"][i];
        const std::string at = where + ": /lessons/" + std::to_string(i);
        if (!l.is_object()) {
            out.problems.push_back({at, "not an object"});
            continue;
        }
        Lesson lesson;
        bool good = true;
        auto text = [&](const char* key, std::string& to, bool required) {
            if (!l.contains(key) || l[key].is_null()) {
                if (required) {
                    out.problems.push_back({at + "/" + key, "missing"});
                    good = false;
                }
                return;
            }
            if (!l[key].is_string() || (required && l[key].get<std::string>().empty())) {
                out.problems.push_back({at + "/" + key, "must be a non-empty string"});
                good = false;
                return;
            }
            to = l[key].get<std::string>();
        };
        text("id", lesson.id, true);
        text("title", lesson.title, true);
        text("strategy", lesson.strategy, false);
        text("correct", lesson.correct, true);
        text("buggy", lesson.buggy, true);
        text("bug", lesson.bug, false);
        text("explanation", lesson.explanation, true);
        for (auto [key, file] : {std::pair{"correct", &lesson.correct}, std::pair{"buggy", &lesson.buggy}}) {
            if (file->empty()) continue;
            auto path = std::filesystem::path(dir) / *file;
            std::error_code ec;
            if (!std::filesystem::is_regular_file(path, ec)) {
                out.problems.push_back({at + "/" + key, "no plan file " + path.string()});
                good = false;
                continue;
            }
            auto canonical = std::filesystem::weakly_canonical(path, ec);
            *file = ec ? path.string() : canonical.string();
        }
        if (good) out.lessons.push_back(std::move(lesson));
    }
    return out;
}

}  // namespace tv
