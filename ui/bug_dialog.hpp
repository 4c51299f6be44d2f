// Bug ▸ Inject Bug: the bug catalog grouped by category; for the chosen bug, the sites in the
// open plan (found on a worker thread: some bugs first write the plan out) and the ranks each
// site runs on. Accepting asks the main window to inject the bug and verify.
#pragma once

#include <QDialog>

#include <atomic>
#include <memory>
#include <vector>

#include "bugs/bug_catalog.hpp"
#include "job_tracker.hpp"

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
    /// The ranks offered for the chosen site (a replica's copy of it, or the group it edits).
    QStringList rankChoices() const;
    bool rankChoosable() const;
    void chooseRank(int index);
    /// The sites found (by their first op), and choosing one as the user would.
    QStringList siteChoices() const;
    void chooseSite(int index);
    /// Inject Bug Here (a node's context menu): the bugs with a site at this parallel op are
    /// found in the background, marked in the list, and the first of them chosen with that site.
    void preferAt(const QString& op);
    /// The bugs found with a site at the preferred op (once bugsAtFound was emitted).
    QStringList bugsAt() const { return bugsAt_; }

signals:
    void sitesFound();
    void bugsAtFound();

private:
    using SitesResult = std::pair<std::vector<bugs::Site>, QString>;
    void onSites(SitesResult result);
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
    QString preferredOp_;      ///< the op Inject Bug Here was asked at, as drawn ("x~mb1~dp1")
    QString preferredStored_;  ///< its stored name ("x"), what sites of a plan stored once list
    int preferredReplica_ = 0; ///< the data-parallel replica it is a copy in
    std::shared_ptr<std::atomic<bool>> stopBugsAt_ = std::make_shared<std::atomic<bool>>(false);
    QStringList bugsAt_;
    JobTracker bugsAtSearch_{this};
    /// The newest search wins; a search still running finishes on the pool (it holds the plan).
    JobTracker siteSearch_{this};
};

}  // namespace tv::ui
