// Compare a plan with its twin: the correct plan and the buggy one (a lesson's pair, a plan and
// the copy Bug > Inject made of it, or any two files) in one stable layout (the same op at the
// same place in both panes), the ops that differ ringed and listed, both verdicts side by side.
// The panes scroll and zoom together; each plan is verified in turn (the second reuses the proofs
// of the stages the two share).
#pragma once

#include <QMainWindow>

#include <atomic>
#include <memory>
#include <vector>

#include "main_window.hpp"

class QComboBox;
class QLabel;
class QTreeWidget;

namespace tv::ui {

class GraphView;
class PlanScene;
class VerificationController;

class CompareWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit CompareWindow(QWidget* parent = nullptr);
    ~CompareWindow() override;

    /// Draws `a` (the reference) and `b` (its twin) in one layout, marks and lists what differs,
    /// and verifies both, `a` first. Replaces what the window compared before.
    void compare(std::shared_ptr<const session::OpenedPlan> a, std::shared_ptr<const session::OpenedPlan> b);
    /// The same with two plan files, read in the background; an unreadable one is said in the window.
    void compareFiles(const QString& a, const QString& b);
    /// A plan already open (a bug injected into it, a pair of nnScaler plans) with a plan file.
    void compareWithFile(std::shared_ptr<const session::OpenedPlan> a, const QString& b);
    void setVerifyOptions(VerifyOptions options) { verifyOptions_ = std::move(options); }

    /// 0: the reference plan, 1: its twin.
    PlanScene* scene(int side) const { return scenes_[side]; }
    GraphView* pane(int side) const { return panes_[side]; }
    /// The verdict line over a pane ("EQUIVALENT: ...", "NOT EQUIVALENT: ...", "verifying…").
    QString headline(int side) const;
    const std::vector<OpChange>& changes() const { return changes_; }
    /// Nodes each change is drawn as, per side (-1: not in that plan, or not drawn).
    int changeNode(int side, std::size_t change) const;
    /// What the panes show: the parallel graphs (where twins differ), the logical ones, or both.
    enum class Shown { Parallel, Logical, Both };
    void setShown(Shown shown);
    /// Selects a change: its op selected and brought into view in both panes.
    void showChange(int index);
    bool busy() const { return loading_ || verifying_ >= 0; }
    QTreeWidget* changeList() const { return list_; }

signals:
    void loaded();
    void loadFailed(const QString& error);
    /// Both plans' verdicts are in.
    void verified();

protected:
    void closeEvent(QCloseEvent* e) override;

private:
    void clear();
    /// A new comparison begins: the old one is dropped and cleared, the titles and what is being done shown.
    void start(const QString& a, const QString& b, const QString& doing);
    /// The comparison cannot be made: why, in both headlines and the summary; loadFailed.
    void fail(const QString& why);
    void read(std::shared_ptr<const session::OpenedPlan> openedA, const QString& a, const QString& b);
    void onLoaded(const LoadedTwins& twins, const QString& error);
    void verifyNext();
    void onVerified(quint64 run, std::shared_ptr<const VerifyReport> report);
    void applyMarks(int side);
    void updatePaneRects();
    void follow(int from);
    void stopLoading();

    PlanScene* scenes_[2];
    GraphView* panes_[2];
    QLabel* titles_[2];
    QLabel* headlines_[2];
    QTreeWidget* list_;
    QLabel* summary_;
    QComboBox* shownBox_;
    VerificationController* verifier_;
    VerifyOptions verifyOptions_ = [] {
        VerifyOptions o;
        o.isolate = true;
        return o;
    }();
    std::vector<OpChange> changes_;
    std::vector<int> changeNodes_[2];
    std::shared_ptr<const VerifyReport> reports_[2];
    quint64 run_ = 0;
    int verifying_ = -1;  ///< the side being verified, -1: none
    bool loading_ = false, following_ = false;
    Shown shown_ = Shown::Parallel;
    std::shared_ptr<std::atomic<bool>> stop_;
    quint64 generation_ = 0;  ///< a newer compare() drops what an older one would deliver
};

}  // namespace tv::ui
