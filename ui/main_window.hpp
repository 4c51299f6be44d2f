// The Studio's main window: the dual view, the inspector, Find, files, export and preferences.
// Its member functions are defined by concept: main_window.cpp (construction, menus, the load
// pipeline, the view), main_window_find.cpp (Find and the filter bar), main_window_verification.cpp
// (the verification presenter), main_window_bugs.cpp (the Bug menu) and main_window_gallery.cpp
// (the example gallery and the lessons).
#pragma once

#include <QMainWindow>
#include <QPointer>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "find_model.hpp"
#include "job_tracker.hpp"
#include "explore/plan_twins.hpp"
#include "plan_scene.hpp"
#include "explore/lessons.hpp"
#include "generate/generator.hpp"
#include "verify/verifier.hpp"

class QDockWidget;
class QLabel;
class QLineEdit;
class QListView;
class QMenu;
class QProgressBar;
class QTimer;
class QToolButton;

namespace tv::ui {

class CompareWindow;
class DualView;
class GraphView;
class Minimap;
class FilterBar;
class Inspector;
class StageBoard;
class FailurePanel;
class VerificationController;
class LessonPanel;
class NoticeBar;
struct StageUpdate;

/// Plans stored once are drawn written out up to this many parallel ops, as stored beyond.
constexpr std::size_t kMaxWrittenOutOps = 400000;
/// What one layout (both sides of a view) may take before it is stopped, by default.
constexpr double kDefaultLayoutSeconds = 120;
/// What dot may take on one side of a view before the quick layered layout draws it instead.
constexpr double kDefaultDotSeconds = 15;
/// Reads, cuts stages, builds the view and lays it out: everything a plan needs, off the GUI thread.
/// `control`: where and within what the layout runs (null: in this thread, unbounded in time).
std::shared_ptr<LoadedPlan> loadPlan(const QString& path, const std::set<std::int32_t>* collapsed, QString* error,
                                     std::size_t maxWrittenOutOps = kMaxWrittenOutOps, const LayoutControl* control = nullptr);
/// The same for a pair: nnScaler plans (pickled ModuleCodeGens, one parallel file) or PyTorch graphs
/// (one file per rank, with an optional relations file), mapped onto the plan model.
std::shared_ptr<LoadedPlan> loadPair(const QString& logicalPath, const QStringList& parallelPaths, const QString& relationsPath, QString* error,
                                     std::size_t maxWrittenOutOps = kMaxWrittenOutOps, const LayoutControl* control = nullptr);
/// The same for a plan already opened (generated, or with a bug injected).
/// Two plans to compare (a plan and its twin), drawn with the same options and placed in one
/// layout of their union (placeTwins), with the ops that differ between the plans drawn.
struct LoadedTwins {
    std::shared_ptr<LoadedPlan> a, b;
    std::vector<OpChange> changes;
    bool ok() const { return a && b; }
};
LoadedTwins loadTwins(std::shared_ptr<const session::OpenedPlan> a, std::shared_ptr<const session::OpenedPlan> b, QString* error,
                      std::size_t maxWrittenOutOps = kMaxWrittenOutOps, const LayoutControl* control = nullptr);
std::shared_ptr<LoadedPlan> loadOpenedPlan(std::shared_ptr<const session::OpenedPlan> opened, QString* error,
                                           std::size_t maxWrittenOutOps = kMaxWrittenOutOps, const LayoutControl* control = nullptr);
/// The plan on screen laid out again with other options (after expanding or collapsing ranks):
/// the plan drawn, the plan verified and its stages stay.
std::shared_ptr<LoadedPlan> relayoutPlan(const LoadedPlan& previous, ViewOptions options, QString* error, const LayoutControl* control = nullptr);

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    /// Opens a plan in the background; emits planLoaded or loadFailed.
    void openPlan(const QString& path);
    /// Opens a pair of nnScaler plans (a logical plan and a parallel plan of it) in the background.
    void openNnScalerPair(const QString& logicalPath, const QString& parallelPath) { openPair(logicalPath, {parallelPath}); }
    /// Opens a pair in the background: nnScaler plans, or a single-device PyTorch graph and one
    /// graph per rank (with an optional relations file).
    void openPair(const QString& logicalPath, const QStringList& parallelPaths, const QString& relationsPath = {});
    PlanScene* scene() const { return scene_; }
    /// The pane drawing the parallel graph (both graphs in one-canvas mode).
    GraphView* view() const;
    DualView* dualView() const { return dual_; }
    Minimap* minimap() const { return minimap_; }
    Inspector* inspector() const { return inspector_; }
    FindResultsModel* findModel() const { return findModel_; }
    void find(const QString& query);
    /// Selects a Find match; with `expand`, first expands the collapsed rank or layer holding it.
    void activateFindResult(int row, bool expand = true);
    bool exportImage(const QString& path);
    bool exportDot(const QString& path);
    void setRanksCollapsed(bool collapsed);
    /// Applies a filter (also reflected in the filter bar); returns the number of nodes shown.
    int applyFilter(const ViewFilter& filter);
    void toggleRank(std::int32_t rank);
    /// Collapses or expands one layer group (ViewLayer::key); all of them with setLayersCollapsed.
    void toggleLayer(const std::string& key);
    void setLayersCollapsed(bool collapsed);
    /// Expands a rank and every layer group of it (or folds its layers again).
    void setRankLayersExpanded(std::int32_t rank, bool expanded);

    /// Verifies the plan on screen in the background (F5); restarts a run in progress.
    void verify();
    /// Cancels the run in progress; it ends inconclusive with what was proven so far.
    void cancelVerification();
    bool verifying() const;
    /// Options of the next run (threads, solver timeout, and callbacks for tests).
    void setVerifyOptions(VerifyOptions options) { verifyOptions_ = std::move(options); }
    VerificationController* verification() const { return verifier_; }
    StageBoard* stageBoard() const { return board_; }
    FailurePanel* failurePanel() const { return failurePanel_; }
    QProgressBar* progressBar() const { return progress_; }
    /// The last finished run's report for the plan on screen (null if none).
    std::shared_ptr<const VerifyReport> report() const { return report_; }
    /// Writes the report as JSON (the command line's schema) or, for a .html path, as one page.
    bool exportReport(const QString& path);
    /// Marks a stage's ops on both sides and centres the view on them.
    void focusStage(std::uint32_t sourceStage);
    /// The guided lessons (resources/lessons/lessons.json).
    const std::vector<Lesson>& lessons() const { return lessons_; }
    /// Opens a lesson's buggy (or correct) plan with its explanation beside the graphs.
    bool openLesson(const QString& id, bool buggy = true);
    LessonPanel* lessonPanel() const { return lessonPanel_; }
    /// Compares two plans in the compare window (one layout, differences ringed, both verified):
    /// a lesson's correct plan with its buggy twin; the plan on screen with a bug injected with
    /// the plan it was made from; the plan on screen with another file.
    bool compareLesson(const QString& id);
    bool compareWithOriginal();
    bool compareWithFile(const QString& path);
    /// The compare window, once one was opened (null before).
    CompareWindow* compareWindow() const;
    /// Injects a catalog bug into a copy of the plan on screen (in the background), opens the
    /// copy and verifies it; emits bugInjected, then verificationFinished.
    void injectBug(const QString& bug, const bugs::MutateOptions& options = {});
    /// Generates a plan (in the background), saves it under the cache directory and opens it;
    /// emits planLoaded, or loadFailed with the reason.
    void generatePlan(const gen::GenerateOptions& options);
    /// The bug injected into the plan on screen (null if none).
    std::shared_ptr<const bugs::Mutant> mutant() const;
    /// What the bug lab says about the last run on an injected bug ("caught at ...").
    QString bugVerdict() const { return bugVerdict_; }
    /// Whether a plan is being opened or a view laid out.
    bool laying() const { return !jobs_.empty(); }
    /// Stops every open and re-layout in progress (View > Cancel Layout): its layout process is
    /// killed; the plan on screen stays. Emits loadFailed for an open it stops.
    void cancelLayout();
    /// What a layout may take before it is stopped (seconds; 0: no bound), and the program its
    /// layout processes run (empty: this one, which serves --layout-process).
    void setLayoutBudget(double seconds) { layoutSeconds_ = seconds; }
    double layoutBudget() const { return layoutSeconds_; }
    /// What dot may take on one side before the layered layout draws it (seconds; 0: the budget).
    void setDotBudget(double seconds) { dotSeconds_ = seconds; }
    /// The notice above the graph (a view drawn with the layered layout, a layout or open refused).
    NoticeBar* noticeBar() const { return notice_; }
    /// View > Reset Layout: the panels where they start, sized to the window (the graph first).
    void resetLayout();
    /// A node's context menu (expand or collapse what holds it, lineage, copy name, its stage);
    /// null for no node. Deletes itself when closed.
    QMenu* nodeMenu(int node);
    /// Every menu command with a shortcut ("View ▸ Fit", "Ctrl+0"), as Help > Keyboard Shortcuts lists them.
    std::vector<std::pair<QString, QString>> shortcuts() const;
    /// What the status bar says while a job runs (what, the side laid out, its size, the time).
    QString layoutProgressText() const;

signals:
    void planLoaded();
    void loadFailed(const QString& message);
    void verificationFinished();
    /// A bug was injected (ok) or refused (the message says why).
    void bugInjected(bool ok, const QString& message);

protected:
    void closeEvent(QCloseEvent* e) override;
    void dragEnterEvent(QDragEnterEvent* e) override;
    void dropEvent(QDropEvent* e) override;

private:
    // main_window.cpp: construction, menus, the load pipeline, the view.
    void buildMenus();
    /// `open`: the job opens a plan (a file, a generated plan, a buggy copy); otherwise it lays the
    /// plan on screen out again. A re-layout never supersedes an open.
    /// The job lays out under the control it is given: in a layout process, within the budget,
    /// stopped by Cancel Layout or by a newer job that supersedes it.
    void startJob(std::function<std::shared_ptr<LoadedPlan>(QString*, const LayoutControl*)> job, const QString& what, bool open = true);
    void onLoaded(quint64 id, std::shared_ptr<LoadedPlan> loaded, const QString& error, bool open, bool cancelled);
    void updateLayoutProgress();
    ViewOptions currentOptions() const;
    void onNodeSelected(int node);
    void onNodeActivated(int node);
    void onGroupActivated(int group);
    void relayout(ViewOptions options);
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    void applyTheme(bool dark);
    void updateStatus();

    // main_window_find.cpp: Find and the filter bar.
    void buildFindDock();
    void buildFilterBar();
    void filterBarChanged(const ViewFilter& filter);
    void reveal(const FindHit& hit);

    // main_window_gallery.cpp: the example gallery and the lessons.
    void buildLessons();
    void showGallery();
    /// Shows the lesson dock beside a lesson's own plans (a new plan on screen), hides it otherwise.
    void showLessonFor(const LoadedPlan& loaded);

    // main_window_verification.cpp: the verification presenter.
    void buildVerification();
    /// A new plan on screen: its stages unverified, no report, no marks.
    void resetVerification(const LoadedPlan& loaded);
    void onStagesUpdated(quint64 run, const QVector<StageUpdate>& updates);
    void onVerified(quint64 run, std::shared_ptr<const VerifyReport> report);
    /// Paints the board's statuses onto the drawn stages, and re-applies the failure's marks.
    void applyVerificationToScene();
    /// Marks of the failing op, its logical counterpart and the other end; the node to centre on.
    std::vector<std::pair<int, NodeMark>> failureMarks(const Failure& f, int* primary, QString* where) const;
    void updateVerifyActions();
    /// Marks the stepper's op and its logical counterpart and centres on the op.
    void showStep(const QString& parallelOp, const QString& logicalOp);

    // main_window_bugs.cpp: the Bug menu.
    void buildBugMenu();

    PlanScene* scene_;
    DualView* dual_;
    Minimap* minimap_;
    Inspector* inspector_;
    FindResultsModel* findModel_;
    QLineEdit* findEdit_ = nullptr;
    QListView* findList_ = nullptr;
    QMenu* recentMenu_ = nullptr;
    QLabel* statusPlan_ = nullptr;
    QLabel* statusZoom_ = nullptr;
    FilterBar* filterBar_ = nullptr;
    /// Opens and re-layouts: the newest one's id drops older re-layouts' results.
    JobTracker loadJobs_{this};
    JobTracker bugJobs_{this};  ///< injecting a bug into a copy of the plan
    quint64 openId_ = 0;        ///< the newest open; results of older opens are dropped
    /// A job in progress: what it does, and what its layout reports and obeys.
    struct Job {
        QString what;
        bool open = false;
        std::atomic<bool> stop{false};
        std::atomic<int> side{-1};           ///< the side being laid out (0 logical, 1 parallel), -1 before
        std::atomic<std::size_t> nodes{0}, edges{0};
        std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    };
    std::map<quint64, std::shared_ptr<Job>> jobs_;
    double layoutSeconds_ = kDefaultLayoutSeconds;
    double dotSeconds_ = kDefaultDotSeconds;
    NoticeBar* notice_ = nullptr;
    QMenu* viewMenu_ = nullptr;
    QByteArray defaultState_, graphOnlyState_;
    /// Saved window layouts of another version are not restored (version 2: tabbed panels).
    static constexpr int kWindowStateVersion = 2;
    void buildPanelsMenu();
    void sizeDocksToWindow();
    void showShortcuts();
    QTimer* layoutTimer_ = nullptr;          ///< refreshes the status bar while a job runs
    QProgressBar* layoutBusy_ = nullptr;
    QToolButton* layoutCancelButton_ = nullptr;
    QAction* cancelLayoutAction_ = nullptr;
    std::optional<ViewOptions> pendingOptions_;
    std::optional<FindHit> pendingReveal_;  ///< a Find match to select once what folds it is expanded
    /// What the newest re-layout opens or closes (a rank, or a layer by its key), kept in view after it.
    struct ViewAnchor {
        std::int32_t rank = -1;
        std::string layerKey;
    };
    std::optional<ViewAnchor> anchor_;
    void keepInView();
    int revealSteps_ = 0;  ///< options of the newest re-layout not yet shown
    QString currentPath_;
    QString currentLogical_;  ///< non-empty when the plan on screen is a pair (nnScaler plans or PyTorch graphs)
    QStringList currentRanks_;  ///< a pair of PyTorch programs: the ranks' graphs
    QString currentRelations_;  ///< and its relations file, if any
    QString pendingRelations_;  ///< the relations file of the pair being opened
    /// Opens the pair on screen again (Reload, Remove Bug).
    void reopenPair();
    bool dark_ = false;

    VerificationController* verifier_ = nullptr;
    StageBoard* board_ = nullptr;
    FailurePanel* failurePanel_ = nullptr;
    LessonPanel* lessonPanel_ = nullptr;
    QDockWidget* lessonDock_ = nullptr;
    std::vector<Lesson> lessons_;
    QPointer<CompareWindow> compare_;
    CompareWindow* ensureCompareWindow();
    /// The plan a bug was injected into (Bug > Compare with Original), while its copy is on screen.
    std::shared_ptr<const session::OpenedPlan> original_;
    QAction* compareOriginalAction_ = nullptr;
    std::optional<Lesson> pendingLesson_;  ///< opened, its plan not yet on screen
    QString bugVerdict_;
    QAction* removeBugAction_ = nullptr;
    QAction* saveBugAction_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QToolButton* cancelButton_ = nullptr;
    QAction* verifyAction_ = nullptr;
    QAction* cancelAction_ = nullptr;
    QAction* exportJsonAction_ = nullptr;
    QAction* exportHtmlAction_ = nullptr;
    /// Stages are checked in solver processes, so Cancel and closing the window stop them for certain.
    VerifyOptions verifyOptions_ = [] {
        VerifyOptions o;
        o.isolate = true;
        return o;
    }();
    quint64 verifyRun_ = 0;        ///< the run whose results the board shows
    std::shared_ptr<const VerifyReport> report_;
    /// Marks that are not the failure's, kept by op (not by view node, which a re-layout renumbers):
    /// the stepper's ops, a rejected bug's edited ops; and a stage focused from the board.
    struct Pin {
        ViewSide side;
        OpId op;
        NodeMark mark;
    };
    std::vector<Pin> pins_;
    std::uint32_t focusedStage_ = kNone;
    /// The nodes a source stage is drawn as (its drawn stages' nodes).
    std::vector<int> stageNodes(std::uint32_t sourceStage) const;
    /// What showing a node frames: it, and its counterparts on the other side (lineage, stage).
    std::vector<int> lineageFrame(int node) const;
};

}  // namespace tv::ui
