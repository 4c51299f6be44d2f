// The example gallery: a list of lessons and example plans, and what each is about.
#include "gallery.hpp"

#include <QCoreApplication>
#include <QDialogButtonBox>
#include <QDir>
#include <QLabel>
#include <QListWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <fstream>

#include <nlohmann/json.hpp>

#include "verify/verifier.hpp"

namespace tv::ui {

QString examplesDir() {
    for (const auto& dir : {QCoreApplication::applicationDirPath() + QStringLiteral("/../share/trainverify-studio/examples"),
                            QStringLiteral(TV_SOURCE_DIR "/resources/examples")})
        if (QDir(dir).exists()) return QDir(dir).canonicalPath();
    return {};
}

QString lessonsDir() {
    for (const auto& dir : {QCoreApplication::applicationDirPath() + QStringLiteral("/../share/trainverify-studio/lessons"),
                            QStringLiteral(TV_SOURCE_DIR "/resources/lessons")})
        if (QDir(dir).exists()) return QDir(dir).canonicalPath();
    return {};
}

QString expectedVerdictText(const nlohmann::json& doc) {
    if (!doc.is_object() || !doc.contains("expect") || !doc["expect"].is_object()) return {};
    const auto& expect = doc["expect"];
    if (!expect.contains("verdict") || !expect["verdict"].is_string()) return {};
    const auto name = expect["verdict"].get<std::string>();
    const auto verdict = verdictFromString(name);
    // An unknown name is shown as written: the file says something this build does not know.
    QString text = verdict ? QString::fromLatin1(headline(*verdict).data()) : QString::fromStdString(name);
    if (!expect.contains("failure") || !expect["failure"].is_object()) return text;
    const auto& f = expect["failure"];
    QString where;
    if (f.contains("kind") && f["kind"].is_string()) {
        try {
            where = QString::fromLatin1(describe(failureKindFromString(f["kind"].get<std::string>())).data());
        } catch (const std::invalid_argument&) {
            where = QString::fromStdString(f["kind"].get<std::string>());
        }
    }
    if (f.contains("parallel_op") && f["parallel_op"].is_string())
        where += QCoreApplication::translate("GalleryDialog", " at %1").arg(QString::fromStdString(f["parallel_op"].get<std::string>()));
    if (f.contains("rank") && f["rank"].is_number_integer())
        where += QCoreApplication::translate("GalleryDialog", " on rank %1").arg(f["rank"].get<int>());
    return where.isEmpty() ? text : text + QStringLiteral(" — ") + where.trimmed();
}

GalleryDialog::GalleryDialog(const std::vector<Lesson>& lessons, const QString& examples, QWidget* parent) : QDialog(parent) {
    setWindowTitle(tr("Example Gallery"));
    auto* layout = new QVBoxLayout(this);
    list_ = new QListWidget(this);
    auto* about = new QTextBrowser(this);
    layout->addWidget(new QLabel(tr("Guided lessons (a buggy plan, its correct twin and an explanation), then the bundled example plans, "
                                    "each with the verdict it should get."),
                                 this));
    layout->addWidget(list_, 2);
    layout->addWidget(about, 1);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Open | QDialogButtonBox::Cancel, this);
    layout->addWidget(buttons);
    for (const auto& lesson : lessons) {
        auto* item = new QListWidgetItem(tr("Lesson: %1").arg(QString::fromStdString(lesson.title)), list_);
        item->setData(Qt::UserRole + 2, QString::fromStdString(lesson.id));
        item->setData(Qt::UserRole + 1, tr("<h3>%1</h3>%2<p><i>Opens the buggy plan with this explanation beside the graphs; press F5.</i></p>")
                                            .arg(QString::fromStdString(lesson.title).toHtmlEscaped(), QString::fromStdString(lesson.explanation)));
        QFont f = item->font();
        f.setBold(true);
        item->setFont(f);
    }
    // No examples directory (an install without them): no examples, not the current directory's files.
    const QFileInfoList files = examples.isEmpty() ? QFileInfoList() : QDir(examples).entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name);
    for (const auto& fi : files) {
        std::ifstream in(fi.absoluteFilePath().toStdString());
        nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
        auto* item = new QListWidgetItem(fi.completeBaseName(), list_);
        item->setData(Qt::UserRole, fi.absoluteFilePath());
        QString desc = doc.is_object() && doc.contains("description") && doc["description"].is_string()
                           ? QString::fromStdString(doc["description"].get<std::string>())
                           : QString();
        const QString verdict = expectedVerdictText(doc);
        item->setData(Qt::UserRole + 1, QStringLiteral("<p>%1</p><p><b>%2</b> %3</p>").arg(desc.toHtmlEscaped(), tr("Expected verdict:"), verdict.toHtmlEscaped()));
    }
    connect(list_, &QListWidget::currentItemChanged, about, [about](QListWidgetItem* item) {
        about->setHtml(item ? item->data(Qt::UserRole + 1).toString() : QString());
    });
    connect(list_, &QListWidget::itemDoubleClicked, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    list_->setCurrentRow(0);
    resize(640, 480);
}

bool GalleryDialog::hasChoice() const { return list_->currentItem() != nullptr; }

QString GalleryDialog::lessonId() const { return list_->currentItem() ? list_->currentItem()->data(Qt::UserRole + 2).toString() : QString(); }

QString GalleryDialog::planPath() const { return list_->currentItem() ? list_->currentItem()->data(Qt::UserRole).toString() : QString(); }

}  // namespace tv::ui
