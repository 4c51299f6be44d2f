#include "theme.hpp"

#include <algorithm>
#include <cmath>

namespace tv::ui {

QPalette darkPalette() {
    const QColor window(45, 45, 50), base(32, 32, 36), button(55, 55, 60), text(230, 230, 235);
    const QColor disabledText(125, 125, 132), placeholder(150, 150, 158);
    QPalette pal;
    for (auto group : {QPalette::Active, QPalette::Inactive, QPalette::Disabled}) {
        pal.setColor(group, QPalette::Window, window);
        pal.setColor(group, QPalette::WindowText, text);
        pal.setColor(group, QPalette::Base, base);
        pal.setColor(group, QPalette::AlternateBase, window);
        pal.setColor(group, QPalette::Text, text);
        pal.setColor(group, QPalette::Button, button);
        pal.setColor(group, QPalette::ButtonText, text);
        pal.setColor(group, QPalette::BrightText, QColor(255, 110, 110));
        pal.setColor(group, QPalette::Highlight, QColor(0, 120, 215));
        pal.setColor(group, QPalette::HighlightedText, Qt::white);
        pal.setColor(group, QPalette::ToolTipBase, button);
        pal.setColor(group, QPalette::ToolTipText, text);
        pal.setColor(group, QPalette::PlaceholderText, placeholder);
        pal.setColor(group, QPalette::Link, QColor(110, 170, 255));
        pal.setColor(group, QPalette::LinkVisited, QColor(180, 140, 255));
        // Fusion draws its bevels and frames from these.
        pal.setColor(group, QPalette::Light, QColor(80, 80, 86));
        pal.setColor(group, QPalette::Midlight, QColor(66, 66, 72));
        pal.setColor(group, QPalette::Mid, QColor(40, 40, 44));
        pal.setColor(group, QPalette::Dark, QColor(25, 25, 28));
        pal.setColor(group, QPalette::Shadow, QColor(10, 10, 12));
    }
    // Disabled: greyed text, flatter buttons, a muted highlight.
    for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText}) pal.setColor(QPalette::Disabled, role, disabledText);
    pal.setColor(QPalette::Disabled, QPalette::Button, QColor(48, 48, 52));
    pal.setColor(QPalette::Disabled, QPalette::Highlight, QColor(70, 70, 78));
    pal.setColor(QPalette::Disabled, QPalette::HighlightedText, disabledText);
    pal.setColor(QPalette::Disabled, QPalette::PlaceholderText, QColor(105, 105, 112));
    return pal;
}

double contrastRatio(const QColor& a, const QColor& b) {
    auto luminance = [](const QColor& c) {
        auto channel = [](double v) { return v <= 0.03928 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4); };
        return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF());
    };
    const double la = luminance(a), lb = luminance(b);
    return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

}  // namespace tv::ui
