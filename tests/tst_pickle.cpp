// The safe pickle reader: every protocol's opcodes give the objects Python pickled, the real
// nnScaler plans read, and truncated, corrupt and hostile input gives a PickleError that says
// where, never a crash or a hang.
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "pickle/pickle.hpp"

using namespace tv::pickle;

namespace {

std::string fromHex(const QString& hex) {
    auto bytes = QByteArray::fromHex(hex.toLatin1());
    return std::string(bytes.constData(), static_cast<std::size_t>(bytes.size()));
}

std::string plansDir() { return std::string(TV_SOURCE_DIR) + "/resources/nnscaler-plans"; }

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// Reads data; true if it parsed, false on a PickleError (any other exception fails the test).
bool readsOrRefuses(const std::string& data, std::string* message = nullptr, const Limits& limits = {}) {
    try {
        auto doc = read(data, limits);
        (void)doc.describe(doc.root, 3);
        return true;
    } catch (const PickleError& e) {
        if (message) *message = e.what();
        return false;
    }
}

}  // namespace

class TestPickle : public QObject {
    Q_OBJECT
private slots:
    /// Pickled by CPython 3.11 (pickle.dumps(obj, protocol=p)); the expected text is the object
    /// as Python prints it, in the reader's notation for what it does not run.
    void protocols_data() {
        QTest::addColumn<QString>("hex");
        QTest::addColumn<QString>("expected");
        QTest::addColumn<int>("protocol");
        const QString mixed = "{'n': None, 't': True, 'f': False, 'i': -5, 'big': 1180591620717411303424, 'x': 1.5, 's': 'héllo', "
                              "'b': <2 bytes>, 'l': [1, (2, 3)], 'e': ()}";
        QTest::newRow("protocol 3")
            << "80037d71002858010000006e71014e58010000007471028858010000006671038958010000006971044afbffffff580300000062696771058a09000000000000"
               "0000405801000000787106473ff80000000000005801000000737107580600000068c3a96c6c6f7108580100000062710943020001710a58010000006c710b5d"
               "710c284b014b024b0386710d65580100000065710e29752e"
            << mixed << 3;
        QTest::newRow("protocol 4")
            << "80049566000000000000007d94288c016e944e8c017494888c016694898c0169944afbffffff8c03626967948a090000000000000000408c017894473ff80000"
               "000000008c0173948c0668c3a96c6c6f948c01629443020001948c016c945d94284b014b024b038694658c01659429752e"
            << mixed << 4;
        QTest::newRow("protocol 5")
            << "80059566000000000000007d94288c016e944e8c017494888c016694898c0169944afbffffff8c03626967948a090000000000000000408c017894473ff80000"
               "000000008c0173948c0668c3a96c6c6f948c01629443020001948c016c945d94284b014b024b038694658c01659429752e"
            << mixed << 5;
        // Protocols 0 to 2 pickle bytes as a call to _codecs.encode, which stays a call.
        QTest::newRow("protocol 2, bytes as a call")
            << "80027d71002858010000006e71014e58010000007471028858010000006671038958010000006971044afbffffff580300000062696771058a09000000000000"
               "0000405801000000787106473ff80000000000005801000000737107580600000068c3a96c6c6f71085801000000627109635f636f646563730a656e636f64"
               "650a710a58020000000001710b58060000006c6174696e31710c86710d52710e58010000006c710f5d7110284b014b024b0386711165580100000065711229752e"
            << "{'n': None, 't': True, 'f': False, 'i': -5, 'big': 1180591620717411303424, 'x': 1.5, 's': 'héllo', 'b': _codecs.encode('\\x00\\x01'"
               ", 'latin1'), 'l': [1, (2, 3)], 'e': ()}"
            << 2;
        QTest::newRow("protocol 0 (text opcodes)")
            << "286470300a566e0a70310a4e7356740a70320a4930310a7356660a70330a4930300a7356690a70340a492d350a73566269670a70350a4c3131383035393136"
               "32303731373431313330333432344c0a7356780a70360a46312e350a7356730a70370a5668e96c6c6f0a70380a7356620a70390a635f636f646563730a656e"
               "636f64650a7031300a28565c7530303030010a7031310a566c6174696e310a7031320a747031330a527031340a73566c0a7031350a286c7031360a49310a61"
               "2849320a49330a747031370a617356650a7031380a2874732e"
            << "{'n': None, 't': True, 'f': False, 'i': -5, 'big': 1180591620717411303424, 'x': 1.5, 's': 'héllo', 'b': _codecs.encode('\\x00\\x01'"
               ", 'latin1'), 'l': [1, (2, 3)], 'e': ()}"
            << 0;
        QTest::newRow("OrderedDict: a call, then set items")
            << "800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271012858010000006171024b0158010000006271035d7104284b024b0365752e"
            << "collections.OrderedDict() + {'a': 1, 'b': [2, 3]}" << 2;
        QTest::newRow("one object twice (memo)")
            << "8004953c000000000000005d94288c0b636f6c6c656374696f6e73948c0b4f72646572656444696374949394295294288c0161944b018c0162945d94284b024b"
               "0365756804652e"
            << "[collections.OrderedDict() + {'a': 1, 'b': [2, 3]}, collections.OrderedDict() + {'a': 1, 'b': [2, 3]}]" << 4;
        QTest::newRow("set and frozenset") << "80049512000000000000005d94288f94284b014b0290284b039194652e" << "[{1, 2}, {3}]" << 4;
        QTest::newRow("a list that holds itself") << "80049509000000000000005d94284b016800652e" << "[1, [1, [1, [1, [1, ...]]]]]" << 4;
        QTest::newRow("integer edges")
            << "80025d7100284affffff7f4a000000808a08ffffffffffffff7f8a0800000000000000804bff4dffff4a00000100652e"
            << "[2147483647, -2147483648, 9223372036854775807, -9223372036854775808, 255, 65535, 65536]" << 2;
        QTest::newRow("negative big integer") << "80028a090000000000000000c02e" << "-1180591620717411303424" << 2;
        QTest::newRow("bytearray") << "8005950e0000000000000096030000000000000078797a942e" << "<3 bytes>" << 5;
    }
    void protocols() {
        QFETCH(QString, hex);
        QFETCH(QString, expected);
        QFETCH(int, protocol);
        auto doc = read(fromHex(hex));
        QCOMPARE(doc.protocol, protocol);
        QCOMPARE(QString::fromStdString(doc.describe(doc.root, 5)), expected);
    }

    /// A class instance (NEWOBJ then BUILD) keeps its class name and its state.
    void instancesKeepClassAndState() {
        // class P in module m, whose __init__ sets self.a = 1 and self.b = 'x', pickled at protocol 4
        auto doc = read(fromHex("80049521000000000000008c016d948c01509493942981947d94288c0161944b018c0162948c01789475622e"));
        QCOMPARE(QString::fromStdString(doc.className(doc.root)), QString("m.P"));
        auto* a = doc.attr(doc.root, "a");
        QVERIFY(a && a->kind == Kind::Int && a->i == 1);
        auto* b = doc.attr(doc.root, "b");
        QVERIFY(b && doc.str(*b) && *doc.str(*b) == "x");
        QVERIFY(doc.node(doc.root).newobj);
        QVERIFY(!doc.attr(doc.root, "c"));
    }

    /// Every nnScaler plan the product is meant to open reads, and is a ModuleCodeGen.
    void nnscalerPlansRead_data() {
        QTest::addColumn<QString>("file");
        for (const auto& e : std::filesystem::directory_iterator(plansDir()))
            if (e.path().extension() == ".pkl") QTest::newRow(e.path().filename().string().c_str()) << QString::fromStdString(e.path().string());
    }
    void nnscalerPlansRead() {
        QFETCH(QString, file);
        auto doc = readFile(file.toStdString());
        QCOMPARE(doc.protocol, 4);
        QCOMPARE(QString::fromStdString(doc.className(doc.root)), QString("nnscaler.codegen.module.module.ModuleCodeGen"));
        QVERIFY(doc.nodes.size() > 1000);
        QVERIFY(doc.attr(doc.root, "execplan"));
    }

    /// Every cut of a real plan is refused with a message, never read as something else.
    void truncatedFilesAreRefused() {
        auto data = slurp(plansDir() + "/mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl");
        QVERIFY(data.size() > 10000);
        std::vector<std::size_t> cuts;
        for (std::size_t k = 0; k < 300; ++k) cuts.push_back(k);
        for (std::size_t k = 1; k < 700; ++k) cuts.push_back(data.size() * k / 700);
        cuts.push_back(data.size() - 1);
        for (auto cut : cuts) {
            std::string msg;
            QVERIFY2(!readsOrRefuses(data.substr(0, cut), &msg), ("a cut at " + std::to_string(cut) + " was read").c_str());
            QVERIFY(msg.rfind("byte ", 0) == 0);
        }
        QVERIFY(readsOrRefuses(data));
    }

    /// Random byte changes in a real plan: read or refused, never a crash.
    void corruptBytesNeverCrash() {
        auto data = slurp(plansDir() + "/mlp_mgener_dp1_pp2_tp1_nm2_gbs16_dim1024_ly2.pkl");
        std::mt19937 rng(20261130);
        std::size_t refused = 0;
        for (int k = 0; k < 2000; ++k) {
            auto copy = data;
            int changes = 1 + static_cast<int>(rng() % 4);
            for (int c = 0; c < changes; ++c) copy[rng() % copy.size()] = static_cast<char>(rng() & 0xff);
            refused += readsOrRefuses(copy) ? 0 : 1;
        }
        QVERIFY(refused > 100);  // many changes hit an opcode or a length
    }

    void hostileInput_data() {
        QTest::addColumn<QString>("hex");
        QTest::addColumn<int>("repeat");  // the hex's middle part ("|"-separated) is repeated this often
        QTest::addColumn<QString>("message");
        auto row = [](const char* name, const char* hex, int repeat, const char* msg) { QTest::newRow(name) << QString(hex) << repeat << QString(msg); };
        row("empty", "", 0, "byte 0: the pickle ends without a STOP opcode");
        row("no STOP", "80044b01", 0, "ends without a STOP");
        row("unknown opcode", "8004ff2e", 0, "byte 2: unknown opcode 0xff");
        row("protocol 6", "80062e", 0, "protocol 6 is newer than 5");
        row("length past the end", "8004580000ffff2e", 0, "opcode BINUNICODE: a length of 4294901760 bytes runs past the end");
        row("frame past the end", "800495ffffffffffffff002e", 0, "opcode FRAME: a length of");
        row("8-byte length past the end", "80048dffffffffffffffff2e", 0, "opcode BINUNICODE8: a length of");
        row("memo entry undefined", "80045d9468052e", 0, "opcode BINGET: memo entry 5 is not defined");
        row("stack underflow", "8004302e", 0, "opcode POP: the stack is empty");
        row("pop a mark that is not there", "8004312e", 0, "opcode POP_MARK: no MARK to pop to");
        row("STOP on an empty stack", "80042e", 0, "STOP with nothing on the stack");
        row("append to a tuple", "8004294b01612e", 0, "opcode APPEND: appends to a tuple");
        row("set item on a list", "80045d4b014b02732e", 0, "opcode SETITEM: sets items of a list");
        row("BUILD on a number", "80044b017d622e", 0, "opcode BUILD: BUILD on a int, which has no state");
        row("call a number", "80044b0129522e", 0, "opcode REDUCE: calls a int, not a class or function");
        row("REDUCE with list arguments", "80048c016d8c016693945d522e", 0, "opcode REDUCE: the arguments are a list, not a tuple");
        row("STACK_GLOBAL of numbers", "80044b014b02932e", 0, "opcode STACK_GLOBAL: STACK_GLOBAL needs two strings");
        row("out-of-band buffer", "8005972e", 0, "out-of-band buffers");
        row("odd set items", "80047d284b01752e", 0, "an odd number of values");
        row("mark bomb", "8004|28|2e", 70000, "more than 65536 nested marks");
        row("text integer not a number", "49317a0a2e", 0, "opcode INT: \"1z\" is not an integer");
        row("huge text integer", "4c|39|0a2e", 5000, "an integer of more than 4096 digits");
    }
    void hostileInput() {
        QFETCH(QString, hex);
        QFETCH(int, repeat);
        QFETCH(QString, message);
        auto parts = hex.split('|');
        QString full = parts.size() == 3 ? parts[0] + parts[1].repeated(repeat) + parts[2] : hex;
        std::string msg;
        bool ok = readsOrRefuses(fromHex(full), &msg);
            QVERIFY2(!ok, "hostile input was read");
        QVERIFY2(msg.find(message.toStdString()) != std::string::npos, msg.c_str());
    }

    /// The limits hold: objects, stack and bytes.
    void limitsAreEnforced() {
        Limits small;
        small.maxNodes = 1000;
        std::string msg;
        QVERIFY(!readsOrRefuses("\x80\x04" + std::string(2000, ']') + ".", &msg, small));
        QVERIFY2(msg.find("more than 1000 objects") != std::string::npos, msg.c_str());
        Limits stack;
        stack.maxStack = 100;
        QVERIFY(!readsOrRefuses("\x80\x04" + std::string(200, 'N') + ".", &msg, stack));
        QVERIFY2(msg.find("the stack grows past 100 values") != std::string::npos, msg.c_str());
        Limits bytes;
        bytes.maxBytes = 10;
        QVERIFY(!readsOrRefuses(std::string("\x80\x04\x8c\x0b") + "hello world.", &msg, bytes));
        QVERIFY2(msg.find("more than 10 bytes of strings") != std::string::npos, msg.c_str());
        // A memo that doubles a list by reference stays small: shared nodes are not copied.
        std::string doubling = "\x80\x04]\x94";  // memo 0: a list; memo k + 1: (memo k, memo k)
        for (int k = 0; k < 60; ++k) doubling += std::string("h") + static_cast<char>(k) + "h" + static_cast<char>(k) + "\x86\x94";
        doubling += ".";
        auto doc = read(doubling);
        QVERIFY(doc.nodes.size() < 100);
        QVERIFY(doc.describe(doc.root, 50).size() < 1000);
    }

    /// The fuzzer's regression corpus (tests/fuzz/pickle-corpus: seeds and every input kept from
    /// fuzzing runs) is read or refused, never a crash.
    void fuzzCorpus_data() {
        QTest::addColumn<QString>("file");
        for (const auto& e : std::filesystem::directory_iterator(std::string(TV_SOURCE_DIR) + "/tests/fuzz/pickle-corpus"))
            QTest::newRow(e.path().filename().string().c_str()) << QString::fromStdString(e.path().string());
    }
    void fuzzCorpus() {
        QFETCH(QString, file);
        auto data = slurp(file.toStdString());
        std::string msg;
        if (!readsOrRefuses(data, &msg)) QVERIFY2(msg.rfind("byte ", 0) == 0, msg.c_str());
    }

    /// A second BUILD updates the state as Python does (later keys win), into a new dict, so a
    /// state merged into itself does not double.
    void buildUpdatesState() {
        auto doc = read(fromHex("8004636d0a410a29817d8c01784b0173627d8c01784b0273622e"));
        auto* x = doc.attr(doc.root, "x");
        QVERIFY(x && x->kind == Kind::Int);
        QCOMPARE(x->i, std::int64_t(2));
        std::string self = fromHex("8004636d0a410a29817d71014e4e7362");
        for (int k = 0; k < 40; ++k) self += fromHex("680162");
        self += ".";
        auto merged = read(self);
        const auto& st = merged.node(merged.node(merged.root).state);
        QCOMPARE(st.entries.size(), std::size_t(1));  // None: None, once
    }

    /// Integers that fit in 64 bits are integers however they are written.
    void integersThatFit() {
        auto a = read(fromHex("49393030303030303030303030303030303030300a2e"));  // INT 9000000000000000000
        QVERIFY(a.root.kind == Kind::Int);
        QCOMPARE(a.root.i, std::int64_t(9000000000000000000));
        auto b = read(fromHex("80028a090500000000000000002e"));  // LONG1 of 5 in 9 bytes
        QVERIFY(b.root.kind == Kind::Int);
        QCOMPARE(b.root.i, std::int64_t(5));
        auto c = read(fromHex("80028a09ffffffffffffffffff2e"));  // -1 in 9 bytes
        QCOMPARE(c.root.i, std::int64_t(-1));
    }

    void validUtf8_data() {
        QTest::addColumn<QByteArray>("in");
        QTest::addColumn<QByteArray>("out");
        QTest::newRow("ascii") << QByteArray("abc") << QByteArray("abc");
        QTest::newRow("two-byte") << QByteArray("h\xc3\xa9") << QByteArray("h\xc3\xa9");
        QTest::newRow("lone continuation") << QByteArray("a\xa9" "b") << QByteArray("a\xef\xbf\xbd" "b");
        QTest::newRow("truncated") << QByteArray("a\xc3") << QByteArray("a\xef\xbf\xbd");
        QTest::newRow("surrogate") << QByteArray("\xed\xa0\x80") << QByteArray("\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
        QTest::newRow("overlong") << QByteArray("\xc0\xaf") << QByteArray("\xef\xbf\xbd\xef\xbf\xbd");
    }
    void validUtf8() {
        QFETCH(QByteArray, in);
        QFETCH(QByteArray, out);
        auto got = tv::pickle::validUtf8(std::string_view(in.constData(), static_cast<std::size_t>(in.size())));
        QCOMPARE(QByteArray(got.data(), static_cast<qsizetype>(got.size())), out);
    }

    void missingFileIsAnError() {
        QVERIFY_THROWS_EXCEPTION(PickleError, readFile("/nonexistent/plan.pkl"));
    }
};

QTEST_APPLESS_MAIN(TestPickle)
#include "tst_pickle.moc"
