// The exp/log normal form: it proves exactly the identities a parallel softmax relies on (taking
// the row maximum out and putting it back, merging blocks of an online softmax, the pieces of a
// vocab-parallel cross-entropy), refuses look-alikes that are false, stays within its size bound,
// and never changes a term's value.
#include <QtTest>

#include <functional>
#include <random>

#include "ops/normal_form.hpp"

using namespace tv;

namespace {

/// Builds both sides of one case from the algebra and the variables x0..x3, v0..v3.
using Sides = std::function<std::pair<z3::expr, z3::expr>(const SymAlgebra&, const std::vector<z3::expr>&, const std::vector<z3::expr>&)>;

struct Case {
    const char* name;
    bool equal;
    Sides sides;
};

z3::expr maxOf(const SymAlgebra& A, const z3::expr& a, const z3::expr& b) { return A.ite(A.ge(a, b), a, b); }

std::vector<Case> cases() {
    return {
        {"softmax shifted by the row max", true,
         [](const SymAlgebra& A, const auto& x, const auto&) {
             auto m = maxOf(A, x[0], x[1]);
             auto par = A.div(A.exp(A.sub(x[0], m)), A.sum({A.exp(A.sub(x[0], m)), A.exp(A.sub(x[1], m))}));
             auto log = A.div(A.exp(x[0]), A.sum({A.exp(x[0]), A.exp(x[1])}));
             return std::pair{log, par};
         }},
        {"log-sum-exp shifted by the row max", true,
         [](const SymAlgebra& A, const auto& x, const auto&) {
             auto m = maxOf(A, maxOf(A, x[0], x[1]), x[2]);
             auto par = A.add(m, A.log(A.sum({A.exp(A.sub(x[0], m)), A.exp(A.sub(x[1], m)), A.exp(A.sub(x[2], m))})));
             auto log = A.log(A.sum({A.exp(x[0]), A.exp(x[1]), A.exp(x[2])}));
             return std::pair{log, par};
         }},
        {"online softmax merges two blocks", true,
         [](const SymAlgebra& A, const auto& x, const auto& v) {
             // block b holds keys {2b, 2b+1}: local max, unnormalized output and sum, then the merge
             std::vector<z3::expr> mb, lb, ob;
             for (int b = 0; b < 2; ++b) {
                 auto m = maxOf(A, x[2 * b], x[2 * b + 1]);
                 auto p0 = A.exp(A.sub(x[2 * b], m)), p1 = A.exp(A.sub(x[2 * b + 1], m));
                 mb.push_back(m);
                 lb.push_back(A.add(p0, p1));
                 ob.push_back(A.add(A.mul(p0, v[2 * b]), A.mul(p1, v[2 * b + 1])));
             }
             auto m = maxOf(A, mb[0], mb[1]);
             auto c0 = A.exp(A.sub(mb[0], m)), c1 = A.exp(A.sub(mb[1], m));
             auto par = A.div(A.add(A.mul(c0, ob[0]), A.mul(c1, ob[1])), A.add(A.mul(c0, lb[0]), A.mul(c1, lb[1])));
             std::vector<z3::expr> e, ev;
             for (int j = 0; j < 4; ++j) e.push_back(A.exp(x[j]));
             auto z = A.sum(e);
             for (int j = 0; j < 4; ++j) ev.push_back(A.mul(A.div(e[j], z), v[j]));
             return std::pair{A.sum(ev), par};
         }},
        {"vocab-parallel cross-entropy of one token", true,
         [](const SymAlgebra& A, const auto& x, const auto&) {
             // two ranks of two classes each; the label is class 2 (on rank 1)
             auto m = maxOf(A, maxOf(A, x[0], x[1]), maxOf(A, x[2], x[3]));
             std::vector<z3::expr> s0{A.exp(A.sub(x[0], m)), A.exp(A.sub(x[1], m))}, s1{A.exp(A.sub(x[2], m)), A.exp(A.sub(x[3], m))};
             auto total = A.sum({A.sum(s0), A.sum(s1)});
             auto picked = A.sum({A.zero(), A.sub(x[2], m)});
             auto par = A.sub(A.log(total), picked);
             auto log = A.sub(A.log(A.sum({A.exp(x[0]), A.exp(x[1]), A.exp(x[2]), A.exp(x[3])})), x[2]);
             return std::pair{log, par};
         }},
        {"vocab-parallel softmax gradient", true,
         [](const SymAlgebra& A, const auto& x, const auto& v) {
             auto m = maxOf(A, x[0], x[1]);
             auto total = A.sum({A.exp(A.sub(x[0], m)), A.exp(A.sub(x[1], m))});
             auto par = A.mul(v[0], A.sub(A.div(A.exp(A.sub(x[1], m)), total), A.one()));
             auto log = A.mul(v[0], A.sub(A.div(A.exp(x[1]), A.sum({A.exp(x[0]), A.exp(x[1])})), A.one()));
             return std::pair{log, par};
         }},
        {"exp of a sum is a product", true,
         [](const SymAlgebra& A, const auto& x, const auto&) { return std::pair{A.exp(A.add(x[0], x[1])), A.mul(A.exp(x[0]), A.exp(x[1]))}; }},
        {"reciprocal of a scaled sum", true,
         [](const SymAlgebra& A, const auto& x, const auto&) {
             auto two = A.num(Rational(2));
             return std::pair{A.div(A.one(), A.add(A.mul(two, x[0]), A.mul(two, x[1]))),
                              A.mul(A.num(Rational(1, 2)), A.div(A.one(), A.add(x[0], x[1])))};
         }},
        {"exp of a sum is not a sum of exps", false,
         [](const SymAlgebra& A, const auto& x, const auto&) { return std::pair{A.exp(A.add(x[0], x[1])), A.add(A.exp(x[0]), A.exp(x[1]))}; }},
        {"log of a sum is not a sum of logs", false,
         [](const SymAlgebra& A, const auto& x, const auto&) { return std::pair{A.log(A.add(x[0], x[1])), A.add(A.log(x[0]), A.log(x[1]))}; }},
        {"numerator shifted, denominator not", false,
         [](const SymAlgebra& A, const auto& x, const auto&) {
             auto m = maxOf(A, x[0], x[1]);
             auto z = A.sum({A.exp(x[0]), A.exp(x[1])});
             return std::pair{A.div(A.exp(x[0]), z), A.div(A.exp(A.sub(x[0], m)), z)};
         }},
        {"max left in the log-sum-exp", false,
         [](const SymAlgebra& A, const auto& x, const auto&) {
             auto m = maxOf(A, x[0], x[1]);
             auto par = A.log(A.sum({A.exp(A.sub(x[0], m)), A.exp(A.sub(x[1], m))}));
             return std::pair{A.log(A.sum({A.exp(x[0]), A.exp(x[1])})), par};
         }},
        {"a constant factor inside a log stays", false,
         [](const SymAlgebra& A, const auto& x, const auto&) { return std::pair{A.log(A.mul(A.num(Rational(2)), A.exp(x[0]))), x[0]}; }},
        {"online softmax merged with the wrong block scale", false,
         [](const SymAlgebra& A, const auto& x, const auto& v) {
             auto m0 = x[0], m1 = x[1];
             auto m = maxOf(A, m0, m1);
             auto c0 = A.exp(A.sub(m0, m)), c1 = A.exp(A.sub(m1, m));
             auto o = A.add(A.mul(c0, v[0]), A.mul(c0, v[1]));  // block 1 scaled by block 0's factor
             auto l = A.add(c0, c1);
             std::vector<z3::expr> e{A.exp(x[0]), A.exp(x[1])};
             auto z = A.sum(e);
             return std::pair{A.add(A.mul(A.div(e[0], z), v[0]), A.mul(A.div(e[1], z), v[1])), A.div(o, l)};
         }},
    };
}

}  // namespace

class TestNormalForm : public QObject {
    Q_OBJECT

private slots:
    void provesExactlyTheIdentities_data() {
        QTest::addColumn<int>("index");
        auto cs = cases();
        for (std::size_t i = 0; i < cs.size(); ++i) QTest::newRow(cs[i].name) << static_cast<int>(i);
    }
    void provesExactlyTheIdentities() {
        QFETCH(int, index);
        const auto c = cases()[static_cast<std::size_t>(index)];
        z3::context ctx;
        SymAlgebra A(ctx);
        std::vector<z3::expr> x, v;
        for (int i = 0; i < 4; ++i) {
            x.push_back(ctx.real_const(("x" + std::to_string(i)).c_str()));
            v.push_back(ctx.real_const(("v" + std::to_string(i)).c_str()));
        }
        auto [lhs, rhs] = c.sides(A, x, v);
        ExpLogNormalizer n(A);
        QVERIFY(n.mentionsExpLog(lhs) || n.mentionsExpLog(rhs));
        auto same = n.provesEqual(lhs, rhs);
        QVERIFY(same.has_value());
        QCOMPARE(*same, c.equal);

        // The normal form never changes a value: both sides, evaluated at random points, before
        // and after, agree; and for the identities, the two sides agree with each other.
        auto nl = n.normalize(lhs), nr = n.normalize(rhs);
        QVERIFY(nl && nr);
        if (c.equal) QVERIFY(z3::eq(*nl, *nr));
        std::mt19937 rng(static_cast<unsigned>(index) + 7);
        std::uniform_real_distribution<double> U(0.1, 1.5);
        bool differs = false;
        for (int trial = 0; trial < 20; ++trial) {
            std::map<std::string, double> val;
            for (int i = 0; i < 4; ++i) {
                val["x" + std::to_string(i)] = U(rng);
                val["v" + std::to_string(i)] = U(rng);
            }
            auto at = [&](const std::string& name) { return val.at(name); };
            const double l = evaluateTerm(lhs, at), r = evaluateTerm(rhs, at);
            QVERIFY2(std::abs(evaluateTerm(*nl, at) - l) <= 1e-9 * (1 + std::abs(l)), "the normal form changed the left side's value");
            QVERIFY2(std::abs(evaluateTerm(*nr, at) - r) <= 1e-9 * (1 + std::abs(r)), "the normal form changed the right side's value");
            if (std::abs(l - r) > 1e-9 * (1 + std::abs(l))) differs = true;
        }
        // The cases are honest: true identities agree numerically, false ones do not.
        QCOMPARE(differs, !c.equal);
    }

    void staysWithinItsSizeBound() {
        z3::context ctx;
        SymAlgebra A(ctx);
        std::vector<z3::expr> a, b;
        for (int i = 0; i < 40; ++i) {
            a.push_back(ctx.real_const(("a" + std::to_string(i)).c_str()));
            b.push_back(ctx.real_const(("b" + std::to_string(i)).c_str()));
        }
        auto big = A.exp(A.mul(A.sum(a), A.sum(b)));  // 1600 monomials in the exponent
        ExpLogNormalizer tight(A, 1000);
        QVERIFY(!tight.normalize(big).has_value());
        QVERIFY(!tight.provesEqual(big, big).has_value());
        ExpLogNormalizer roomy(A, 5000);
        QVERIFY(roomy.normalize(big).has_value());
    }
};

QTEST_APPLESS_MAIN(TestNormalForm)
#include "tst_normal_form.moc"
