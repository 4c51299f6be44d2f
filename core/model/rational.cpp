#include "model/rational.hpp"

#include <cctype>
#include <limits>
#include <numeric>

namespace tv {

namespace {

__extension__ typedef __int128 i128;

Rational fromWide(i128 n, i128 d) {
    if (d == 0) throw std::domain_error("rational with zero denominator");
    if (d < 0) { n = -n; d = -d; }
    i128 a = n < 0 ? -n : n;
    i128 b = d;
    while (b != 0) { i128 t = a % b; a = b; b = t; }
    if (a > 1) { n /= a; d /= a; }
    constexpr i128 lo = std::numeric_limits<std::int64_t>::min() + 1;
    constexpr i128 hi = std::numeric_limits<std::int64_t>::max();
    if (n < lo || n > hi || d > hi) throw RationalOverflow("rational arithmetic overflows 64 bits");
    return Rational(static_cast<std::int64_t>(n), static_cast<std::int64_t>(d));
}

}  // namespace

Rational::Rational(std::int64_t n, std::int64_t d) {
    if (d == 0) throw std::domain_error("rational with zero denominator");
    if (d < 0) { n = -n; d = -d; }
    std::int64_t g = std::gcd(n < 0 ? -n : n, d);
    if (g > 1) { n /= g; d /= g; }
    num_ = n;
    den_ = d;
}

Rational operator+(const Rational& a, const Rational& b) {
    return fromWide(static_cast<i128>(a.num_) * b.den_ + static_cast<i128>(b.num_) * a.den_,
                    static_cast<i128>(a.den_) * b.den_);
}
Rational operator-(const Rational& a, const Rational& b) { return a + (-b); }
Rational operator*(const Rational& a, const Rational& b) {
    return fromWide(static_cast<i128>(a.num_) * b.num_, static_cast<i128>(a.den_) * b.den_);
}
Rational operator/(const Rational& a, const Rational& b) {
    if (b.num_ == 0) throw std::domain_error("rational division by zero");
    return fromWide(static_cast<i128>(a.num_) * b.den_, static_cast<i128>(a.den_) * b.num_);
}
bool operator<(const Rational& a, const Rational& b) {
    return static_cast<i128>(a.num_) * b.den_ < static_cast<i128>(b.num_) * a.den_;
}

std::optional<Rational> Rational::parse(std::string_view s) {
    auto parseInt = [](std::string_view t, i128& out) -> bool {
        if (t.empty()) return false;
        bool neg = false;
        std::size_t i = 0;
        if (t[0] == '-' || t[0] == '+') { neg = t[0] == '-'; i = 1; }
        if (i == t.size()) return false;
        i128 v = 0;
        for (; i < t.size(); ++i) {
            if (!std::isdigit(static_cast<unsigned char>(t[i]))) return false;
            v = v * 10 + (t[i] - '0');
            if (v > (static_cast<i128>(1) << 100)) return false;
        }
        out = neg ? -v : v;
        return true;
    };
    try {
        if (auto slash = s.find('/'); slash != std::string_view::npos) {
            i128 n = 0, d = 0;
            if (!parseInt(s.substr(0, slash), n) || !parseInt(s.substr(slash + 1), d) || d == 0) return std::nullopt;
            return fromWide(n, d);
        }
        // Decimal with optional fraction and exponent, converted exactly.
        std::string_view mant = s;
        int exp10 = 0;
        if (auto e = s.find_first_of("eE"); e != std::string_view::npos) {
            i128 ev = 0;
            if (!parseInt(s.substr(e + 1), ev) || ev > 30 || ev < -30) return std::nullopt;
            exp10 = static_cast<int>(ev);
            mant = s.substr(0, e);
        }
        std::string digits;
        if (auto dot = mant.find('.'); dot != std::string_view::npos) {
            // Trailing zeros of the fraction change nothing ("1.50" is 1.5): dropped before the
            // digits are read, so that a long run of them does not exceed the mantissa's range.
            auto frac = mant.substr(dot + 1);
            while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);
            digits = std::string(mant.substr(0, dot)) + std::string(frac);
            exp10 -= static_cast<int>(frac.size());
            if (mant.substr(0, dot) == "-" || mant.substr(0, dot) == "+" || mant.substr(0, dot).empty())
                digits = std::string(mant.substr(0, dot)) + "0" + std::string(frac);
        } else {
            digits = std::string(mant);
        }
        i128 n = 0;
        if (!parseInt(digits, n)) return std::nullopt;
        // Scaled by 10^exp10 with every step checked (a mantissa of 2^100 times 10^30 does not fit
        // in 128 bits, and wrapping would read another number: such a value is refused); trailing
        // zeros of a fraction are divided out first.
        constexpr i128 limit = static_cast<i128>(1) << 120;
        i128 d = 1;
        while (exp10 < 0 && n % 10 == 0 && n != 0) { n /= 10; ++exp10; }
        if (n == 0) exp10 = 0;
        while (exp10 > 0) {
            if (n > limit / 10 || n < -limit / 10) return std::nullopt;
            n *= 10;
            --exp10;
        }
        while (exp10 < 0) {
            if (d > limit / 10) return std::nullopt;
            d *= 10;
            ++exp10;
        }
        return fromWide(n, d);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::string Rational::toString() const {
    if (den_ == 1) return std::to_string(num_);
    return std::to_string(num_) + "/" + std::to_string(den_);
}

}  // namespace tv
