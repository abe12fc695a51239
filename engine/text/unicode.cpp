// ICU-backed Unicode helpers (see unicode.h). The only translation unit that includes ICU.
#include "engine/text/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "engine/core/tensor.h"

namespace attnlab::unicode {

std::u32string decode(std::string_view s, const std::string& what) {
  std::u32string out;
  out.reserve(s.size());
  auto bad = [&](size_t i) { throw Error(what + " is not valid UTF-8 at byte " + std::to_string(i)); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    char32_t cp;
    if (c < 0x80) {
      n = 1, cp = c;
    } else if ((c >> 5) == 0x6) {
      n = 2, cp = c & 0x1f;
    } else if ((c >> 4) == 0xe) {
      n = 3, cp = c & 0x0f;
    } else if ((c >> 3) == 0x1e) {
      n = 4, cp = c & 0x07;
    } else {
      bad(i);
    }
    if (i + n > s.size()) bad(i);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) bad(i);
      cp = (cp << 6) | (d & 0x3f);
    }
    static const char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) bad(i);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
  return out;
}

std::string encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) out += encode(c);
  return out;
}

const char* category(char32_t cp, double max_age) {
  if (max_age > 0) {
    UVersionInfo v;
    u_charAge(static_cast<UChar32>(cp), v);
    const double age = v[0] + v[1] / 10.0;
    if (age > max_age + 1e-9) return "Cn";
  }
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER: return "Lu";
    case U_LOWERCASE_LETTER: return "Ll";
    case U_TITLECASE_LETTER: return "Lt";
    case U_MODIFIER_LETTER: return "Lm";
    case U_OTHER_LETTER: return "Lo";
    case U_NON_SPACING_MARK: return "Mn";
    case U_ENCLOSING_MARK: return "Me";
    case U_COMBINING_SPACING_MARK: return "Mc";
    case U_DECIMAL_DIGIT_NUMBER: return "Nd";
    case U_LETTER_NUMBER: return "Nl";
    case U_OTHER_NUMBER: return "No";
    case U_SPACE_SEPARATOR: return "Zs";
    case U_LINE_SEPARATOR: return "Zl";
    case U_PARAGRAPH_SEPARATOR: return "Zp";
    case U_CONTROL_CHAR: return "Cc";
    case U_FORMAT_CHAR: return "Cf";
    case U_PRIVATE_USE_CHAR: return "Co";
    case U_SURROGATE: return "Cs";
    case U_DASH_PUNCTUATION: return "Pd";
    case U_START_PUNCTUATION: return "Ps";
    case U_END_PUNCTUATION: return "Pe";
    case U_CONNECTOR_PUNCTUATION: return "Pc";
    case U_OTHER_PUNCTUATION: return "Po";
    case U_MATH_SYMBOL: return "Sm";
    case U_CURRENCY_SYMBOL: return "Sc";
    case U_MODIFIER_SYMBOL: return "Sk";
    case U_OTHER_SYMBOL: return "So";
    case U_INITIAL_PUNCTUATION: return "Pi";
    case U_FINAL_PUNCTUATION: return "Pf";
    default: return "Cn";
  }
}

bool is_white_space(char32_t cp) {
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE);
}

namespace {
icu::UnicodeString to_icu(std::u32string_view s) {
  return icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(s.data()), static_cast<int32_t>(s.size()));
}
std::u32string from_icu(const icu::UnicodeString& u) {
  std::u32string out(static_cast<size_t>(u.countChar32()), U'\0');
  UErrorCode err = U_ZERO_ERROR;
  u.toUTF32(reinterpret_cast<UChar32*>(out.data()), static_cast<int32_t>(out.size()), err);
  return out;
}
}  // namespace

std::u32string nfd(std::u32string_view s) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err)) throw Error("ICU: no NFD normaliser (" + std::string(u_errorName(err)) + ")");
  icu::UnicodeString out = n->normalize(to_icu(s), err);
  if (U_FAILURE(err)) throw Error("ICU: NFD failed (" + std::string(u_errorName(err)) + ")");
  return from_icu(out);
}

std::u32string nfc(std::u32string_view s) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) throw Error("ICU: no NFC normaliser (" + std::string(u_errorName(err)) + ")");
  icu::UnicodeString out = n->normalize(to_icu(s), err);
  if (U_FAILURE(err)) throw Error("ICU: NFC failed (" + std::string(u_errorName(err)) + ")");
  return from_icu(out);
}

std::u32string to_lower(std::u32string_view s) {
  // Character by character, as Rust's char::to_lowercase (no final-sigma context): the simple
  // mapping, except U+0130, the one unconditional multi-character lower case in SpecialCasing.txt.
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c == 0x130) {
      out += U"i\u0307";
    } else {
      out.push_back(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))));
    }
  }
  return out;
}

}  // namespace attnlab::unicode
