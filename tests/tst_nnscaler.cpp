// nnScaler's pickled plans read as typed per-device programs: for every bundled plan, each
// device's cells by kind (the counts of docs/research/nnscaler-ir.md §1.4, found there by an
// independent reading of the same files), microbatches from the schedule, backward operators
// paired with their forward ones, adapters with their primitives, and sub-tensors with boxes
// and value parts.
#include <QtTest>

#include <map>
#include <set>

#include "nnscaler/nnscaler_plan.hpp"

using namespace tv;
using namespace tv::nnscaler;

namespace {

std::string planPath(const QString& name) { return std::string(TV_SOURCE_DIR) + "/resources/nnscaler-plans/" + name.toStdString() + ".pkl"; }

Plan load(const QString& name) { return readPlan(pickle::readFile(planPath(name))); }

}  // namespace

class TestNnScaler : public QObject {
    Q_OBJECT
private slots:
    void devicePrograms_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("devices");
        QTest::addColumn<int>("ranks");
        QTest::addColumn<int>("microbatches");
        QTest::addColumn<int>("device");
        // per device: data loaders, forward ops, backward ops, adapters, reducers
        QTest::addColumn<QList<int>>("counts");
        auto row = [](const char* file, int devices, int ranks, int nm, int device, QList<int> counts) {
            QTest::newRow((std::string(file).substr(0, 24) + " device " + std::to_string(device)).c_str())
                << QString(file) << devices << ranks << nm << device << counts;
        };
        row("mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2", 1, 1, 1, 0, {1, 3, 3, 0, 0});
        row("mlp_mgener_dp1_pp1_tp2_nm1_gbs16_dim1024_ly2", 2, 2, 1, 1, {1, 3, 3, 6, 1});
        row("mlp_mgener_dp1_pp2_tp1_nm2_gbs16_dim1024_ly2", 2, 2, 2, 0, {2, 4, 4, 6, 0});
        row("mlp_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly2", 4, 8, 2, 0, {2, 4, 4, 14, 1});
        row("mlp_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly2", 4, 8, 2, 3, {2, 4, 4, 14, 0});
        row("gpt_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly1_h2_hi1024_sq2048", 1, 1, 1, 0, {1, 20, 20, 0, 0});
        row("gpt_mgener_dp1_pp1_tp2_nm1_gbs16_dim1024_ly1_h2_hi1024_sq2048", 2, 2, 1, 0, {1, 21, 21, 42, 1});
        row("gpt_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly1_h2_hi1024_sq2048", 4, 8, 2, 1, {2, 18, 18, 34, 3});
        row("gpt_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly1_h2_hi1024_sq2048", 4, 8, 2, 2, {2, 24, 24, 30, 3});
        row("llama3_default_dp1_pp1_tp1_nm1_gbs512_ly2_h32_hi4096_sq128", 1, 1, 1, 0, {1, 116, 115, 0, 0});
        row("llama3_default_dp2_pp1_tp2_nm2_gbs512_ly2_h32_hi4096_sq128", 2, 4, 2, 1, {2, 232, 230, 16, 1});
        row("llama3_default_dp2_pp2_tp2_nm2_gbs512_ly2_h32_hi4096_sq128", 4, 8, 2, 0, {2, 116, 114, 24, 1});
        row("llama3_default_dp2_pp2_tp2_nm2_gbs512_ly2_h32_hi4096_sq128", 4, 8, 2, 3, {2, 120, 118, 24, 1});
        row("llama3_default_dp16_pp4_tp8_nm8_gbs512_ly2_h32_hi4096_sq128", 32, 512, 8, 5, {8, 224, 216, 64, 1});
        row("llama3_default_dp16_pp4_tp8_nm8_gbs512_ly2_h32_hi4096_sq128", 32, 512, 8, 12, {8, 264, 256, 152, 1});
        row("llama3_default_dp16_pp4_tp8_nm8_gbs512_ly2_h32_hi4096_sq128", 32, 512, 8, 16, {8, 248, 240, 80, 1});
        row("llama3_default_dp16_pp4_tp8_nm8_gbs512_ly2_h32_hi4096_sq128", 32, 512, 8, 31, {8, 240, 240, 56, 1});
        row("moe_default_dp1_pp1_tp1_nm1_gbs1024_ly2_h16_hi512_sq128_a2_r16", 1, 1, 1, 0, {1, 121, 120, 0, 0});
        row("moe_default_dp2_pp2_tp2_nm2_gbs1024_ly2_h16_hi512_sq128_a2_r16", 4, 8, 2, 1, {2, 124, 118, 28, 1});
        row("moe_default_dp2_pp2_tp2_nm2_gbs1024_ly2_h16_hi512_sq128_a2_r16", 4, 8, 2, 2, {2, 130, 128, 52, 1});
        row("llama3adpt_mgener_dp1_pp1_tp1_nm1_gbs64_ly1_h32_hi4096_sq128", 1, 1, 1, 0, {1, 65, 64, 0, 0});
        row("llama3adpt_mgener_dp2_pp2_tp2_nm2_gbs64_ly1_h32_hi4096_sq128", 4, 8, 2, 0, {2, 62, 60, 20, 1});
        row("llama3adpt_mgener_dp2_pp2_tp2_nm2_gbs64_ly1_h32_hi4096_sq128", 4, 8, 2, 3, {2, 70, 70, 22, 1});
    }
    void devicePrograms() {
        QFETCH(QString, file);
        QFETCH(int, devices);
        QFETCH(int, ranks);
        QFETCH(int, microbatches);
        QFETCH(int, device);
        QFETCH(QList<int>, counts);
        auto plan = load(file);
        QCOMPARE(static_cast<int>(plan.devices.size()), devices);
        QCOMPARE(plan.runtimeRanks, ranks);
        QCOMPARE(plan.microbatches, microbatches);
        QCOMPARE(static_cast<int>(plan.programs.size()), devices);
        std::map<CellKind, int> have;
        std::set<int> mbs;
        for (const auto& c : plan.programs.at(device)) {
            ++have[c.kind];
            if (c.kind != CellKind::Reducer) mbs.insert(c.microbatch);
        }
        const std::vector<CellKind> kinds{CellKind::DataLoader, CellKind::Forward, CellKind::Backward, CellKind::Adapter, CellKind::Reducer};
        for (std::size_t k = 0; k < kinds.size(); ++k) QCOMPARE(have[kinds[k]], counts[static_cast<qsizetype>(k)]);
        // every microbatch runs on every device, and no other
        QCOMPARE(static_cast<int>(mbs.size()), microbatches);
        QCOMPARE(*mbs.rbegin(), microbatches - 1);
    }

    /// A backward operator is its forward operator's: the same operator, on the same device,
    /// mirrored both ways, in the same microbatch, and later.
    void backwardMirrorsForward() {
        for (const char* f : {"llama3_default_dp2_pp2_tp2_nm2_gbs512_ly2_h32_hi4096_sq128", "moe_default_dp2_pp2_tp2_nm2_gbs1024_ly2_h16_hi512_sq128_a2_r16"}) {
            auto plan = load(f);
            int paired = 0;
            for (const auto& [dev, cells] : plan.programs) {
                std::map<std::pair<std::int64_t, int>, std::size_t> forwardAt;
                for (std::size_t i = 0; i < cells.size(); ++i) {
                    const auto& c = cells[i];
                    if (c.kind == CellKind::Forward) forwardAt[{c.id, c.microbatch}] = i;
                    if (c.kind != CellKind::Backward) continue;
                    auto it = forwardAt.find({c.mirror, c.microbatch});
                    QVERIFY2(it != forwardAt.end(), qPrintable(QString("backward %1 on device %2").arg(c.id).arg(dev)));
                    const auto& fw = cells[it->second];
                    QCOMPARE(fw.mirror, c.id);
                    QCOMPARE(fw.signature, c.signature);
                    QCOMPARE(fw.annotation, c.annotation);
                    ++paired;
                }
            }
            QVERIFY(paired > 400);
        }
    }

    /// Operators carry their annotation as nnScaler writes it, kwargs as constants.
    void operatorsAndAnnotations() {
        auto plan = load("llama3_default_dp2_pp2_tp2_nm2_gbs512_ly2_h32_hi4096_sq128");
        std::map<std::string, std::set<std::string>> annos;
        for (const auto& [dev, cells] : plan.programs)
            for (const auto& c : cells)
                if (c.kind == CellKind::Forward) annos[c.signature].insert(c.annotation);
        QVERIFY(annos.count("torch.nn.functional.linear"));
        QVERIFY(annos["torch.nn.functional.linear"].count("a b k+, n k+ -> a b n"));
        QVERIFY(annos.count("nnscaler.runtime.function.embedding"));
        QVERIFY(annos.count("genmodel.model.llama3_adpt.model.apply_rotary_emb"));
        auto mlp = load("mlp_mgener_dp1_pp1_tp2_nm1_gbs16_dim1024_ly2");
        const auto& first = mlp.programs.at(0);
        QCOMPARE(first[0].kind, CellKind::DataLoader);
        QCOMPARE(QString::fromStdString(first[1].annotation), QString("a k+, n k+ -> a n"));
        QVERIFY(first[1].kwargs.contains("bias"));
        QVERIFY(first[1].kwargs["bias"].is_null());
    }

    /// Sub-tensors: boxes inside their full tensor (numpy integers decoded), value parts, the
    /// weights split by tensor parallelism.
    void subTensors() {
        auto plan = load("mlp_mgener_dp1_pp1_tp2_nm1_gbs16_dim1024_ly2");
        bool halfWeight = false, partial = false;
        for (const auto& [id, t] : plan.tensors) {
            QCOMPARE(t.box.size(), t.fullShape.size());
            for (std::size_t d = 0; d < t.box.size(); ++d) QVERIFY(0 <= t.box[d].first && t.box[d].first < t.box[d].second && t.box[d].second <= t.fullShape[d]);
            if (t.isParameter() && t.name == "layers.0.weight" && t.box[0] == std::pair<std::int64_t, std::int64_t>{0, 512}) halfWeight = true;
            if (t.parts == 2) partial = true;
        }
        QVERIFY(halfWeight);
        QVERIFY(partial);
        auto big = load("llama3_default_dp16_pp4_tp8_nm8_gbs512_ly2_h32_hi4096_sq128");  // numpy int64 in index maps
        int adapters = 0, prims = 0;
        std::set<std::string> kinds;
        for (const auto& [dev, cells] : big.programs)
            for (const auto& c : cells)
                if (c.kind == CellKind::Adapter) {
                    ++adapters;
                    for (const auto& p : c.primitives) {
                        ++prims;
                        kinds.insert(p.kind);
                        if (p.kind == "AllGatherPrim" || p.kind == "ChunkPrim") QVERIFY(p.kwargs.contains("ranks") && p.kwargs.contains("dim"));
                        if (p.kind == "MovePrim") QVERIFY(p.kwargs["src"].is_number_integer() && p.kwargs["dst"].is_number_integer());
                    }
                }
        QVERIFY(adapters > 2000);
        QVERIFY(prims >= adapters);
        for (const char* k : {"MovePrim", "ChunkPrim", "AllGatherPrim", "AllReduceIdentityPrim", "IdentityAllreducePrim"})
            QVERIFY2(kinds.count(k), k);
    }

    /// Constants are bounded: a list that holds itself several times, written as JSON, stays small.
    void constantsOfCyclesStaySmall() {
        // [L, L, L, L, L, L] where L is the list itself (memo 0)
        auto data = QByteArray::fromHex("80045d9428680068006800680068006800652e");
        auto doc = pickle::read(std::string_view(data.constData(), static_cast<std::size_t>(data.size())));
        auto j = constantOf(doc, doc.root);
        QVERIFY(j.is_array());
        QVERIFY(j.dump().size() < 100000);
    }

    void notAnNnScalerPlan() {
        // a pickled OrderedDict: a pickle, but not a plan
        auto data = QByteArray::fromHex("800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271012858010000006171024b0158010000006271035d7104284b024b0365752e");
        auto doc = pickle::read(std::string_view(data.constData(), static_cast<std::size_t>(data.size())));
        try {
            readPlan(doc);
            QFAIL("accepted");
        } catch (const NnScalerError& e) {
            QVERIFY2(std::string(e.what()).find("not an nnScaler plan") != std::string::npos, e.what());
        }
    }
};

QTEST_APPLESS_MAIN(TestNnScaler)
#include "tst_nnscaler.moc"
