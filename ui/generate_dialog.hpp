// File ▸ Generate Plan: the plan generator behind a form (model preset and size overrides,
// parallel degrees, microbatches, schedule, optimizer, format). The configuration is checked as
// it is edited (the generator's own validate()), so OK is enabled only for one it can generate.
#pragma once

#include <QDialog>

#include "generate/generator.hpp"

class QCheckBox;
class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;

namespace tv::ui {

class GenerateDialog : public QDialog {
    Q_OBJECT
public:
    explicit GenerateDialog(QWidget* parent = nullptr);
    gen::GenerateOptions options() const;
    void setOptions(const gen::GenerateOptions& o);
    /// Why the configuration cannot be generated; empty when it can.
    QString problem() const { return problem_; }

private:
    void check();

    QComboBox* model_;
    QSpinBox* layers_;     ///< 0: the preset's
    QSpinBox *dp_, *tp_, *pp_, *microbatches_, *ep_, *cp_;
    QComboBox* zero_;
    QCheckBox* sp_;
    QComboBox* schedule_;
    QComboBox* optimizer_;
    QComboBox* format_;
    QLabel* status_;
    QPushButton* ok_;
    QString problem_;
};

}  // namespace tv::ui
