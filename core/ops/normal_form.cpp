#include "ops/normal_form.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tv {

namespace {

struct TooBig {};

using Atom = std::uint32_t;
using PolyId = std::uint32_t;  ///< interned polynomial; 0 is the zero polynomial

/// c * prod(atom^power) * exp(expo)
struct Term {
    Rational c{1};
    std::vector<std::pair<Atom, std::int32_t>> mono;  ///< sorted by atom, no zero powers
    PolyId expo = 0;
};
using Poly = std::vector<Term>;  ///< sorted by (mono, expo), merged, no zero coefficients

bool sameKey(const Term& a, const Term& b) { return a.expo == b.expo && a.mono == b.mono; }
bool keyLess(const Term& a, const Term& b) {
    if (a.mono != b.mono) return a.mono < b.mono;
    return a.expo < b.expo;
}

}  // namespace

struct ExpLogNormalizer::Impl {
    const SymAlgebra& alg;
    std::size_t maxTerms;

    std::deque<Poly> polys{Poly{}};  ///< a deque: references stay valid as polynomials are added
    std::unordered_map<std::string, PolyId> polyIds{{std::string(), 0}};
    std::vector<z3::expr> atoms;
    std::unordered_map<unsigned, Atom> opaqueAtoms;         ///< AST id -> atom
    std::map<std::pair<int, PolyId>, Atom> functionAtoms;   ///< (0 log | 1 inv, argument) -> atom
    std::unordered_map<unsigned, PolyId> fromMemo;          ///< AST id -> normal form
    std::unordered_map<PolyId, z3::expr> toMemo;
    std::map<std::pair<PolyId, PolyId>, PolyId> sumMemo;
    std::unordered_map<unsigned, bool> mentionMemo;
    std::vector<z3::expr> keepAlive;  ///< ASTs whose ids the memos use

    Impl(const SymAlgebra& a, std::size_t m) : alg(a), maxTerms(m) {}

    // ----- polynomials ------------------------------------------------------------------------

    static std::string keyOf(const Poly& p) {
        std::string k;
        for (const auto& t : p) {
            k += std::to_string(t.c.num()) + '/' + std::to_string(t.c.den()) + '*';
            for (const auto& [a, n] : t.mono) k += std::to_string(a) + '^' + std::to_string(n) + '.';
            k += 'e' + std::to_string(t.expo) + ';';
        }
        return k;
    }
    PolyId intern(Poly p) {
        auto k = keyOf(p);
        if (auto it = polyIds.find(k); it != polyIds.end()) return it->second;
        polys.push_back(std::move(p));
        auto id = static_cast<PolyId>(polys.size() - 1);
        polyIds.emplace(std::move(k), id);
        return id;
    }
    const Poly& poly(PolyId id) const { return polys[id]; }

    void canonicalize(Poly& p) const {
        std::sort(p.begin(), p.end(), keyLess);
        Poly out;
        for (auto& t : p) {
            if (!out.empty() && sameKey(out.back(), t))
                out.back().c = out.back().c + t.c;
            else
                out.push_back(std::move(t));
            if (!out.empty() && out.back().c.isZero()) out.pop_back();
        }
        if (out.size() > maxTerms) throw TooBig{};
        p = std::move(out);
    }
    PolyId constant(const Rational& r) {
        if (r.isZero()) return 0;
        return intern(Poly{Term{r, {}, 0}});
    }
    PolyId add(PolyId a, PolyId b) {
        if (a == 0) return b;
        if (b == 0) return a;
        auto k = std::minmax(a, b);
        if (auto it = sumMemo.find(k); it != sumMemo.end()) return it->second;
        Poly p = poly(a);
        p.insert(p.end(), poly(b).begin(), poly(b).end());
        canonicalize(p);
        auto id = intern(std::move(p));
        sumMemo.emplace(k, id);
        return id;
    }
    PolyId scale(PolyId a, const Rational& r) {
        if (r.isZero() || a == 0) return 0;
        Poly p = poly(a);
        for (auto& t : p) t.c = t.c * r;
        return intern(std::move(p));
    }
    PolyId sub(PolyId a, PolyId b) { return add(a, scale(b, Rational(-1))); }
    static std::vector<std::pair<Atom, std::int32_t>> mulMono(const std::vector<std::pair<Atom, std::int32_t>>& a,
                                                             const std::vector<std::pair<Atom, std::int32_t>>& b) {
        std::vector<std::pair<Atom, std::int32_t>> out;
        std::size_t i = 0, j = 0;
        while (i < a.size() || j < b.size()) {
            if (j == b.size() || (i < a.size() && a[i].first < b[j].first)) out.push_back(a[i++]);
            else if (i == a.size() || b[j].first < a[i].first) out.push_back(b[j++]);
            else {
                auto n = a[i].second + b[j].second;
                if (n != 0) out.emplace_back(a[i].first, n);
                ++i;
                ++j;
            }
        }
        return out;
    }
    PolyId mul(PolyId a, PolyId b) {
        if (a == 0 || b == 0) return 0;
        const Poly& pa = poly(a);
        const Poly& pb = poly(b);
        if (pa.size() * pb.size() > maxTerms) throw TooBig{};
        Poly p;
        p.reserve(pa.size() * pb.size());
        for (const auto& x : pa)
            for (const auto& y : pb) p.push_back(Term{x.c * y.c, mulMono(x.mono, y.mono), add(x.expo, y.expo)});
        canonicalize(p);
        return intern(std::move(p));
    }
    PolyId exp(PolyId a) { return intern(Poly{Term{Rational(1), {}, a}}); }
    PolyId atomPoly(Atom a, std::int32_t power = 1) { return intern(Poly{Term{Rational(1), {{a, power}}, 0}}); }

    /// The exponent every term of p shares (the exponent terms with one coefficient in all of
    /// them), and p with it taken out. p = exp(shared) * rest, and rest is the same for p and
    /// exp(d) p whatever d is.
    std::pair<PolyId, PolyId> takeOutSharedExp(PolyId id) {
        const Poly& p = poly(id);
        if (p.empty()) return {0, 0};
        Poly shared;
        for (const auto& e : poly(p[0].expo)) {
            bool all = true;
            for (std::size_t i = 1; i < p.size() && all; ++i) {
                const Poly& ei = poly(p[i].expo);
                auto it = std::lower_bound(ei.begin(), ei.end(), e, keyLess);
                all = it != ei.end() && sameKey(*it, e) && it->c == e.c;
            }
            if (all) shared.push_back(e);
        }
        if (shared.empty()) return {0, id};
        auto sharedId = intern(std::move(shared));
        Poly rest;
        for (const auto& t : p) rest.push_back(Term{t.c, t.mono, sub(t.expo, sharedId)});
        canonicalize(rest);
        return {sharedId, intern(std::move(rest))};
    }
    Atom functionAtom(int fn, PolyId arg) {
        auto k = std::make_pair(fn, arg);
        if (auto it = functionAtoms.find(k); it != functionAtoms.end()) return it->second;
        auto x = toExpr(arg);
        atoms.push_back(fn == 0 ? alg.fLog(x) : alg.fInv(x));
        auto a = static_cast<Atom>(atoms.size() - 1);
        functionAtoms.emplace(k, a);
        return a;
    }
    PolyId log(PolyId arg) {
        auto [shared, rest] = takeOutSharedExp(arg);
        const Poly& r = poly(rest);
        if (r.size() == 1 && r[0].mono.empty() && r[0].expo == 0 && r[0].c == Rational(1)) return shared;  // log(exp(c)) = c
        return add(shared, atomPoly(functionAtom(0, rest)));
    }
    PolyId inv(PolyId arg) {
        auto [shared, rest] = takeOutSharedExp(arg);
        const Poly& r = poly(rest);
        if (r.size() == 1) {
            // c x^n: its reciprocal is (1/c) x^-n
            if (r[0].c.isZero()) throw TooBig{};
            Term t{Rational(1) / r[0].c, r[0].mono, scale(shared, Rational(-1))};
            for (auto& [a, n] : t.mono) n = -n;
            return intern(Poly{t});
        }
        if (r.empty()) return atomPoly(functionAtom(1, 0));  // 1/0: one unknown
        // A sum: its reciprocal is an atom of the sum scaled so its first coefficient is 1.
        const Rational lead = r[0].c;
        auto monic = scale(rest, Rational(1) / lead);
        Poly p{Term{Rational(1) / lead, {{functionAtom(1, monic), 1}}, scale(shared, Rational(-1))}};
        return intern(std::move(p));
    }

    // ----- from and to Z3 ---------------------------------------------------------------------

    Atom opaque(const z3::expr& e) {
        auto id = e.id();
        if (auto it = opaqueAtoms.find(id); it != opaqueAtoms.end()) return it->second;
        atoms.push_back(e);
        auto a = static_cast<Atom>(atoms.size() - 1);
        opaqueAtoms.emplace(id, a);
        return a;
    }
    static Rational numeral(const z3::expr& e) {
        std::int64_t n = 0, d = 1;
        if (e.is_numeral_i64(n)) return Rational(n);
        if (!e.numerator().is_numeral_i64(n) || !e.denominator().is_numeral_i64(d)) throw TooBig{};
        return Rational(n, d);
    }

    PolyId from(const z3::expr& e) {
        if (auto it = fromMemo.find(e.id()); it != fromMemo.end()) return it->second;
        auto r = fromUncached(e);
        keepAlive.push_back(e);
        fromMemo.emplace(e.id(), r);
        return r;
    }
    PolyId fromUncached(const z3::expr& e) {
        if (e.is_numeral()) return constant(numeral(e));
        if (!e.is_app() || !e.is_real()) return atomPoly(opaque(e));
        const auto d = e.decl();
        const unsigned n = e.num_args();
        switch (d.decl_kind()) {
            case Z3_OP_ADD: {
                PolyId s = 0;
                for (unsigned i = 0; i < n; ++i) s = add(s, from(e.arg(i)));
                return s;
            }
            case Z3_OP_SUB: {
                PolyId s = from(e.arg(0));
                for (unsigned i = 1; i < n; ++i) s = sub(s, from(e.arg(i)));
                return s;
            }
            case Z3_OP_UMINUS: return scale(from(e.arg(0)), Rational(-1));
            case Z3_OP_MUL: {
                PolyId p = constant(Rational(1));
                for (unsigned i = 0; i < n; ++i) p = mul(p, from(e.arg(i)));
                return p;
            }
            case Z3_OP_DIV:
                if (e.arg(1).is_numeral()) {
                    auto r = numeral(e.arg(1));
                    if (r.isZero()) return atomPoly(opaque(e));
                    return scale(from(e.arg(0)), Rational(1) / r);
                }
                return mul(from(e.arg(0)), inv(from(e.arg(1))));
            case Z3_OP_UNINTERPRETED: {
                if (n == 0) return atomPoly(opaque(e));
                const auto name = d.name().str();
                if (n == 1 && name == "exp") return exp(from(e.arg(0)));
                if (n == 1 && name == "log") return log(from(e.arg(0)));
                if (n == 1 && name == "inv") return inv(from(e.arg(0)));
                // Another function: an atom of its normalized arguments.
                z3::expr_vector args(e.ctx());
                for (unsigned i = 0; i < n; ++i) args.push_back(e.arg(i).is_real() ? toExpr(from(e.arg(i))) : e.arg(i));
                auto g = d(args);
                keepAlive.push_back(g);
                return atomPoly(opaque(g));
            }
            case Z3_OP_ITE: {
                auto g = z3::ite(e.arg(0), toExpr(from(e.arg(1))), toExpr(from(e.arg(2))));
                keepAlive.push_back(g);
                return atomPoly(opaque(g));
            }
            default: return atomPoly(opaque(e));
        }
    }

    z3::expr toExpr(PolyId id) {
        if (auto it = toMemo.find(id); it != toMemo.end()) return it->second;
        z3::expr_vector terms(alg.c);
        for (const auto& t : poly(id)) {
            std::vector<z3::expr> factors;
            for (const auto& [a, n] : t.mono) {
                auto x = n > 0 ? atoms[a] : alg.fInv(atoms[a]);
                for (std::int32_t k = 0; k < (n > 0 ? n : -n); ++k) factors.push_back(x);
            }
            if (t.expo != 0) factors.push_back(alg.fExp(toExpr(t.expo)));
            z3::expr term = alg.num(t.c);
            if (!factors.empty()) {
                term = factors[0];
                for (std::size_t k = 1; k < factors.size(); ++k) term = term * factors[k];
                if (!(t.c == Rational(1))) term = alg.num(t.c) * term;
            }
            terms.push_back(term);
        }
        z3::expr r = terms.empty() ? alg.zero() : terms.size() == 1 ? terms[0] : z3::sum(terms);
        toMemo.emplace(id, r);
        return r;
    }

    bool mentions(const z3::expr& e) {
        if (!e.is_app() || e.num_args() == 0) return false;
        if (auto it = mentionMemo.find(e.id()); it != mentionMemo.end()) return it->second;
        bool m = false;
        if (e.decl().decl_kind() == Z3_OP_UNINTERPRETED) {
            const auto name = e.decl().name().str();
            m = name == "exp" || name == "log" || name == "inv";
        }
        for (unsigned i = 0; i < e.num_args() && !m; ++i) m = mentions(e.arg(i));
        keepAlive.push_back(e);
        mentionMemo.emplace(e.id(), m);
        return m;
    }
};

ExpLogNormalizer::ExpLogNormalizer(const SymAlgebra& alg, std::size_t maxTerms) : impl_(std::make_unique<Impl>(alg, maxTerms)) {}
ExpLogNormalizer::~ExpLogNormalizer() = default;

bool ExpLogNormalizer::mentionsExpLog(const z3::expr& e) { return impl_->mentions(e); }

namespace {
/// Runs f, or gives nothing where the normal form would exceed its bound or overflow 64-bit
/// rationals: the term is then left to the solver as it is.
template <class F>
auto boundedOrNothing(F&& f) -> std::optional<decltype(f())> {
    try {
        return f();
    } catch (const TooBig&) {
        return std::nullopt;
    } catch (const std::domain_error&) {
        return std::nullopt;
    } catch (const RationalOverflow&) {
        return std::nullopt;
    }
}
}  // namespace

std::optional<z3::expr> ExpLogNormalizer::normalize(const z3::expr& e) {
    return boundedOrNothing([&] { return impl_->toExpr(impl_->from(e)); });
}

std::optional<bool> ExpLogNormalizer::provesEqual(const z3::expr& a, const z3::expr& b) {
    return boundedOrNothing([&] { return impl_->from(a) == impl_->from(b); });
}

}  // namespace tv
