// Exact rational numbers for lineage coefficients and op constants.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tv {

class Rational {
public:
    constexpr Rational() = default;
    constexpr Rational(std::int64_t n) : num_(n), den_(1) {}  // NOLINT: implicit from integers is intended
    Rational(std::int64_t n, std::int64_t d);

    std::int64_t num() const { return num_; }
    std::int64_t den() const { return den_; }
    bool isZero() const { return num_ == 0; }
    bool isOne() const { return num_ == 1 && den_ == 1; }
    bool isInteger() const { return den_ == 1; }
    double toDouble() const { return static_cast<double>(num_) / static_cast<double>(den_); }

    /// "3", "-1/2", "0.25", "1e-5" (decimal forms are converted exactly).
    static std::optional<Rational> parse(std::string_view text);
    /// Canonical text: "3" or "-1/2".
    std::string toString() const;

    friend Rational operator+(const Rational& a, const Rational& b);
    friend Rational operator-(const Rational& a, const Rational& b);
    friend Rational operator*(const Rational& a, const Rational& b);
    friend Rational operator/(const Rational& a, const Rational& b);
    Rational operator-() const { return Rational(-num_, den_); }
    friend bool operator==(const Rational& a, const Rational& b) = default;
    friend bool operator<(const Rational& a, const Rational& b);

private:
    std::int64_t num_ = 0;
    std::int64_t den_ = 1;
};

/// Thrown when rational arithmetic would overflow 64-bit numerators or denominators.
struct RationalOverflow : std::overflow_error {
    using std::overflow_error::overflow_error;
};

}  // namespace tv
