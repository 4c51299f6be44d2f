#include "failure_panel.hpp"

#include <QLabel>
#include <QTextBrowser>
#include <QTextDocumentFragment>
#include <QVBoxLayout>

#include "verify/report_html.hpp"

namespace tv::ui {

FailurePanel::FailurePanel(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(4, 4, 4, 4);
    headline_ = new QLabel(this);
    headline_->setWordWrap(true);
    headline_->setTextFormat(Qt::RichText);
    body_ = new QTextBrowser(this);
    body_->setOpenLinks(false);
    v->addWidget(headline_);
    v->addWidget(body_, 1);
    clear();
}

void FailurePanel::clear() {
    headline_->setText(tr("<b>Not verified.</b> Press F5 (Verify ▸ Verify) to check the plan stage by stage."));
    body_->clear();
}

void FailurePanel::showRunning() {
    headline_->setText(tr("<b>Verifying…</b> Stages turn green as they are proven; the first failure will be shown here."));
    body_->clear();
}

void FailurePanel::showReport(const VerifyReport& r, const QString& where) {
    const char* colour = r.verdict == Verdict::Equivalent ? "#2e7d32" : r.verdict == Verdict::NotEquivalent ? "#c62828"
                         : r.verdict == Verdict::Inconclusive                                     ? "#ef6c00"
                                                                                                    : "#6a1b9a";
    const std::string summary = reportToText(r);
    const QString first = QString::fromStdString(summary.substr(0, summary.find('\n')));
    headline_->setText(QStringLiteral("<span style=\"color:%1; font-weight:600\">%2</span>").arg(QLatin1String(colour), first.toHtmlEscaped()));
    QString html;
    if (r.failure) {
        html += QString::fromStdString(failureToHtml(*r.failure, "Diagnosis"));
        if (!where.isEmpty()) html += QStringLiteral("<p><i>%1</i></p>").arg(where.toHtmlEscaped());
        if (r.failures.size() > 1)
            html += tr("<p>%n more failure(s) in later stages: filter the stage board by “failed”.</p>", nullptr,
                       static_cast<int>(r.failures.size() - 1));
    } else if (r.verdict == Verdict::Equivalent) {
        html = tr("<p>Every stage is proven: the parallel plan computes exactly what the logical plan computes, "
                  "for all inputs. %1 of %2 stages were solved; the others reuse an isomorphic proof%3.</p>")
                   .arg(r.uniqueStages)
                   .arg(r.results.size())
                   .arg(r.cachedStages ? tr(" or one from an earlier run (%1)").arg(r.cachedStages) : QString());
    }
    for (const auto& w : r.warnings) html += QStringLiteral("<p><b>%1</b> %2</p>").arg(tr("Warning:"), QString::fromStdString(w).toHtmlEscaped());
    body_->setHtml(html);
}

QString FailurePanel::headline() const { return QTextDocumentFragment::fromHtml(headline_->text()).toPlainText(); }

QString FailurePanel::text() const { return headline() + QStringLiteral("\n") + body_->toPlainText(); }

}  // namespace tv::ui
