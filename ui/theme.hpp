// The Studio's palettes. The dark one sets every colour group: disabled text must look
// disabled, and placeholder text must stay readable on the dark base.
#pragma once

#include <QPalette>

namespace tv::ui {

QPalette darkPalette();
/// The WCAG 2 contrast ratio of two colours (1 to 21): what "readable" is measured by.
double contrastRatio(const QColor& a, const QColor& b);

}  // namespace tv::ui
