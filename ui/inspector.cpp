#include "inspector.hpp"

#include <QPainter>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "ops/registry.hpp"

namespace tv::ui {

namespace {

QColor rankColor(std::int32_t rank) {
    if (rank < 0) return QColor(200, 200, 200);
    return QColor::fromHsv((rank * 67) % 360, 110, 235);
}

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

}  // namespace

LineageGrid::LineageGrid(QWidget* parent) : QWidget(parent) { setMinimumHeight(160); }

void LineageGrid::setTensor(const Plan* plan, TensorId logical) {
    cells_.clear();
    records_ = 0;
    title_.clear();
    if (plan && logical != kNone) {
        const auto& L = plan->logical;
        const auto& full = plan->shape(L, logical);
        title_ = QString::fromStdString(plan->tensorName(L, logical) + " " + shapeToString(full));
        auto frac = [&](const Box& b, std::size_t d, bool hi) -> double {
            if (d >= full.size()) return hi ? 1.0 : 0.0;
            return static_cast<double>(hi ? b.hi[d] : b.lo[d]) / static_cast<double>(full[d]);
        };
        for (std::uint32_t r = 0; r < plan->lineage.size(); ++r) {
            const auto& rec = plan->lineage[r];
            if (rec.logical != logical) continue;
            for (const auto& s : rec.slices) {
                // Rows: dim 0; columns: dim 1 (a 1-D tensor is one row of columns).
                double y0 = full.size() >= 2 ? frac(s.box, 0, false) : 0, y1 = full.size() >= 2 ? frac(s.box, 0, true) : 1;
                double x0 = full.size() >= 2 ? frac(s.box, 1, false) : frac(s.box, 0, false);
                double x1 = full.size() >= 2 ? frac(s.box, 1, true) : frac(s.box, 0, true);
                const auto n = static_cast<double>(s.copies.size());
                for (std::size_t c = 0; c < s.copies.size(); ++c) {
                    Cell cell;
                    cell.record = records_;
                    cell.box = QRectF(x0, y0 + (y1 - y0) * static_cast<double>(c) / n, x1 - x0, (y1 - y0) / n);
                    cell.partial = s.copies[c].size() > 1;
                    QStringList terms;
                    for (const auto& t : s.copies[c]) {
                        const auto& ti = plan->parallel.tensors[t.tensor];
                        QString term = QString::fromStdString(plan->tensorName(plan->parallel, t.tensor));
                        if (!t.coeff.isOne()) term = QString::fromStdString(t.coeff.toString()) + QStringLiteral("·") + term;
                        if (ti.microbatch >= 0) term += QStringLiteral(" [mb%1]").arg(ti.microbatch);
                        terms << term;
                    }
                    cell.rank = plan->parallel.tensors[s.copies[c].front().tensor].rank;
                    cell.text = (cell.partial ? QStringLiteral("Σ ") : QString()) + terms.join(QStringLiteral(" + "));
                    cells_.push_back(cell);
                }
            }
            ++records_;
        }
    }
    update();
}

void LineageGrid::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    p.fillRect(rect(), palette().base());
    if (cells_.empty()) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect().adjusted(8, 8, -8, -8), Qt::AlignCenter | Qt::TextWordWrap, tr("Select a tensor with lineage to see its shards"));
        return;
    }
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRectF(8, 4, width() - 16, 18), Qt::AlignLeft | Qt::AlignVCenter, title_ + tr("  (%n record(s))", nullptr, records_));
    const qreal top = 26, gap = 8;
    const qreal bandH = (height() - top - 8 - gap * (records_ - 1)) / std::max(1, records_);
    QFont f = p.font();
    f.setPointSizeF(7.5);
    p.setFont(f);
    for (const auto& c : cells_) {
        QRectF band(8, top + c.record * (bandH + gap), width() - 16, bandH);
        QRectF r(band.left() + c.box.left() * band.width(), band.top() + c.box.top() * band.height(), c.box.width() * band.width(),
                 c.box.height() * band.height());
        p.setBrush(rankColor(c.rank));
        p.setPen(QPen(QColor(60, 60, 70), c.partial ? 1.6 : 1, c.partial ? Qt::DashLine : Qt::SolidLine));
        p.drawRect(r);
        p.setPen(Qt::black);
        p.drawText(r.adjusted(3, 1, -3, -1), Qt::AlignCenter | Qt::TextWordWrap, c.text);
    }
}

Inspector::Inspector(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    text_ = new QTextBrowser(this);
    text_->setOpenLinks(false);
    grid_ = new LineageGrid(this);
    layout->addWidget(text_, 3);
    layout->addWidget(grid_, 2);
    show(nullptr, -1);
}

QString Inspector::text() const { return text_->toPlainText(); }

void Inspector::show(const LoadedPlan* loaded, int node) {
    grid_->setTensor(nullptr, kNone);
    if (!loaded || node < 0 || node >= static_cast<int>(loaded->view.nodes.size())) {
        text_->setHtml(tr("<p>Select an op or a tensor to inspect it. Its counterparts on the other side are "
                          "highlighted.</p>"));
        return;
    }
    const auto& plan = *loaded->plan;
    const auto& n = loaded->view.nodes[node];
    const auto& g = n.side == ViewSide::Logical ? plan.logical : plan.parallel;
    const auto& reg = OpRegistry::instance();
    QString html;
    auto row = [&](const QString& k, const QString& v) { html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(k, v); };
    auto tensorLine = [&](TensorId t) {
        const auto& ti = g.tensors[t];
        QString s = esc(plan.tensorName(g, t)) + QStringLiteral(" ") + esc(shapeToString(plan.shape(g, t)));
        s += QStringLiteral(" <i>%1</i>").arg(esc(std::string(toString(ti.role))));
        if (ti.dtype == DType::Int) s += QStringLiteral(" int");
        if (ti.microbatch >= 0) s += QStringLiteral(" mb %1").arg(ti.microbatch);
        return s;
    };
    const QString side = n.side == ViewSide::Logical ? tr("logical") : tr("parallel");
    if (n.kind == ViewNodeKind::CollapsedLayer) {
        const auto& layer = loaded->view.layers[n.id];
        html += QStringLiteral("<h3>%1</h3><table>").arg(esc(n.name));
        row(tr("side"), side);
        if (layer.rank >= 0) row(tr("rank"), QStringLiteral("%1 (%2)").arg(layer.rank).arg(esc(plan.coordinates(layer.rank))));
        if (layer.microbatch >= 0) row(tr("microbatch"), QString::number(layer.microbatch));
        row(tr("phase"), esc(std::string(toString(layer.phase))));
        row(tr("ops"), QString::number(layer.ops));
        row(tr("stages"), QString::number(layer.stages));
        html += QStringLiteral("</table><p>") +
                tr("Collapsed: double-click it (or use View ▸ Expand All Layers) to lay out its ops; double-click the band of an "
                   "expanded layer to fold it again.") +
                QStringLiteral("</p>");
        text_->setHtml(html);
        return;
    }
    if (n.kind == ViewNodeKind::CollapsedRank) {
        html += QStringLiteral("<h3>%1</h3><p>%2</p><p>").arg(esc(n.name), esc(n.label)) +
                tr("Collapsed: double-click it (or use View ▸ Expand all ranks) to lay out its ops.") + QStringLiteral("</p>");
        text_->setHtml(html);
        return;
    }
    if (n.kind == ViewNodeKind::Op) {
        const auto& o = g.ops[n.id];
        const auto& spec = reg.spec(o.kind);
        html += QStringLiteral("<h3>%1</h3><table>").arg(esc(n.name));
        row(tr("side"), side);
        row(tr("kind"), esc(std::string(spec.name)) + QStringLiteral(" — ") + esc(std::string(spec.summary)));
        row(tr("phase"), esc(std::string(toString(o.phase))));
        if (o.rank >= 0) row(tr("rank"), QStringLiteral("%1 (%2)").arg(o.rank).arg(esc(plan.coordinates(o.rank))));
        if (o.group != kNone) {
            QStringList ranks;
            for (auto r : plan.groups[o.group]) ranks << QString::number(r);
            row(tr("group"), ranks.join(QStringLiteral(", ")));
        }
        if (o.microbatch >= 0) row(tr("microbatch"), QString::number(o.microbatch));
        if (n.stage != kNone) row(tr("stage"), QString::number(n.stage));
        if (const auto* s = plan.opSource(g, n.id))
            row(tr("source"), esc(s->toString()) + (s->code.empty() ? QString() : QStringLiteral("<br><code>%1</code>").arg(esc(s->code))));
        const auto& attrs = plan.opAttrs(g, n.id);
        if (!attrs.empty()) row(tr("attributes"), esc(attrs.dump()));
        QStringList ins, outs;
        for (auto t : g.inputs(n.id)) ins << tensorLine(t);
        for (auto t : g.outputs(n.id)) outs << tensorLine(t);
        row(tr("inputs"), ins.join(QStringLiteral("<br>")));
        row(tr("outputs"), outs.join(QStringLiteral("<br>")));
        html += QStringLiteral("</table>");
    } else {
        const auto& ti = g.tensors[n.id];
        html += QStringLiteral("<h3>%1</h3><table>").arg(esc(n.name));
        row(tr("side"), side);
        row(tr("shape"), esc(shapeToString(plan.shape(g, n.id))));
        row(tr("role"), esc(std::string(toString(ti.role))));
        row(tr("dtype"), esc(std::string(toString(ti.dtype))));
        if (ti.rank >= 0) row(tr("rank"), QStringLiteral("%1 (%2)").arg(ti.rank).arg(esc(plan.coordinates(ti.rank))));
        if (ti.microbatch >= 0) row(tr("microbatch"), QString::number(ti.microbatch));
        row(tr("produced by"), ti.producer == kNone ? tr("(an input)") : esc(plan.opName(g, ti.producer)));
        if (n.stage != kNone) row(tr("proven by stage"), QString::number(n.stage));
        html += QStringLiteral("</table>");
        TensorId logical = n.id;
        if (n.side == ViewSide::Parallel) {
            logical = kNone;
            for (const auto& rec : plan.lineage)
                for (const auto& s : rec.slices)
                    for (const auto& c : s.copies)
                        for (const auto& t : c)
                            if (t.tensor == n.id) {
                                logical = rec.logical;
                                html += QStringLiteral("<p>") +
                                        tr("Holds %1 of logical <b>%2</b> %3, coefficient %4.")
                                            .arg(c.size() > 1 ? tr("a partial sum") : tr("a copy"), esc(plan.tensorName(plan.logical, rec.logical)),
                                                 esc(s.box.toString()), esc(t.coeff.toString())) +
                                        QStringLiteral("</p>");
                            }
        }
        grid_->setTensor(&plan, logical);
    }
    text_->setHtml(html);
}

}  // namespace tv::ui
