// Bug ▸ Inject Bug: the bug catalog grouped by category; for the chosen bug, the sites in the
// open plan (found on a worker thread: some bugs first write the plan out) and the ranks each
// site runs on. Accepting asks the main window to inject the bug and verify.
#pragma once

#include <QDialog>
#include <QFutureWatcher>

#include <memory>
#include <vector>

#include "bugs/bug_catalog.hpp"

class QComboBox;
class QLabel;
class QPushButton;
class QTreeWidget;

namespace tv::ui {

class BugDialog : public QDialog {
    Q_OBJECT
public:
    BugDialog(std::shared_ptr<const Plan> plan, QWidget* parent = nullptr);
    ~BugDialog() override;
    /// Chooses a bug as the user would (the sites are then found in the background).
    void selectBug(const QString& name);
    QString bug() const { return bug_; }
    bugs::MutateOptions options() const;
    /// Whether the sites of the chosen bug are known (found, or refused with a reason).
    bool sitesReady() const { return ready_; }
    QString status() const;

signals:
    void sitesFound();

private:
    void onSites();
    void fillRanks();

    std::shared_ptr<const Plan> plan_;
    QTreeWidget* tree_;
    QLabel* about_;
    QLabel* status_;
    QComboBox* site_;
    QComboBox* rank_;
    QPushButton* ok_;
    QString bug_;
    bool ready_ = false;
    std::vector<bugs::Site> sites_;
    using SitesResult = std::pair<std::vector<bugs::Site>, QString>;
    QFutureWatcher<SitesResult>* watcher_ = nullptr;
    quint64 request_ = 0;
};

}  // namespace tv::ui
