// The example gallery (File ▸ Example Gallery): the guided lessons, then the bundled example
// plans, each with what it shows and the verdict it should get. And where those are installed.
#pragma once

#include <QDialog>

#include <nlohmann/json_fwd.hpp>

#include <vector>

#include "explore/lessons.hpp"

class QListWidget;

namespace tv::ui {

/// The bundled example plans' directory (installed, else the source tree's); empty if neither.
QString examplesDir();
/// The guided lessons' directory (installed, else the source tree's); empty if neither.
QString lessonsDir();
/// An example's expect block in words: "NOT EQUIVALENT — values differ (counterexample) at fc2@r0 on rank 0".
QString expectedVerdictText(const nlohmann::json& doc);

class GalleryDialog : public QDialog {
    Q_OBJECT
public:
    /// Lists `lessons` first, then the plans (*.json) in `examples`.
    GalleryDialog(const std::vector<Lesson>& lessons, const QString& examples, QWidget* parent = nullptr);
    /// Whether an entry is chosen (none when there is nothing to list).
    bool hasChoice() const;
    /// The lesson chosen (its id); empty when the choice is an example plan.
    QString lessonId() const;
    /// The example plan chosen (its path); empty when the choice is a lesson.
    QString planPath() const;

private:
    QListWidget* list_;
};

}  // namespace tv::ui
