// Work off the GUI thread, its result delivered on it: the one way the Studio runs core work
// (hotspot's JobTracker is the model). Value in, value out; GUI state is touched only in the
// delivery, on the GUI thread. Every job gets a new id; a result arrives through a watcher
// parented to the tracker's context object, so nothing is delivered once that object is gone.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QThreadPool>
#include <QtConcurrent>

#include <type_traits>
#include <utility>

namespace tv::ui {

class JobTracker {
public:
    /// Who gets a job's result.
    enum class Delivery {
        NewestOnly,  ///< only while no newer job was started: a superseded result is dropped
        Always,      ///< every result (the receiver decides, e.g. by id)
    };

    /// `context` receives the results (on its thread); `pool` runs the work (null: Qt's global pool).
    explicit JobTracker(QObject* context, QThreadPool* pool = nullptr) : context_(context), pool_(pool) {}

    /// Starts `work` (a callable returning a value) and returns the job's id; `deliver(id, value)`
    /// is called on the context's thread when it ends, as `delivery` says.
    template <class Work, class Deliver>
    quint64 start(Work work, Deliver deliver, Delivery delivery = Delivery::NewestOnly) {
        using Result = std::invoke_result_t<Work&>;
        const quint64 id = ++newest_;
        auto* watcher = new QFutureWatcher<Result>(context_);
        QObject::connect(watcher, &QFutureWatcherBase::finished, context_,
                         [this, watcher, id, delivery, deliver = std::move(deliver)]() mutable {
                             watcher->deleteLater();
                             if (delivery == Delivery::NewestOnly && id != newest_) return;
                             deliver(id, watcher->result());
                         });
        watcher->setFuture(pool_ ? QtConcurrent::run(pool_, std::move(work)) : QtConcurrent::run(std::move(work)));
        return id;
    }

    /// The id of the newest job started (0: none yet).
    quint64 newest() const { return newest_; }
    /// The id the next start() returns: for work that must know its id before it is started
    /// (callbacks that filter by it).
    quint64 next() const { return newest_ + 1; }

private:
    QObject* context_;
    QThreadPool* pool_;
    quint64 newest_ = 0;
};

}  // namespace tv::ui
