// A small XML well-formedness check for the tests of the SVG charts and the HTML report: one root
// element (after an optional <?xml?>, <!DOCTYPE> and comments), properly nested, attribute values
// quoted and unique per element, '&' only in the five predefined or numeric references, no '<' in
// text or attribute values, no control characters. No DTD and no namespace checks.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace skipsoftmax::test {

class XmlChecker {
 public:
  explicit XmlChecker(std::string_view text) : s_(text) {}

  // "" when well-formed, else "byte N: what".
  std::string error() {
    try {
      prolog();
      if (!starts("<")) fail("expected the root element");
      element();
      misc();
      if (pos_ != s_.size()) fail("content after the root element");
    } catch (const std::string& e) {
      return e;
    }
    return "";
  }
  int elements() const { return elements_; }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw "byte " + std::to_string(pos_) + ": " + what;
  }
  bool starts(std::string_view p) const { return s_.substr(pos_).starts_with(p); }
  void expect(std::string_view p) {
    if (!starts(p)) fail("expected \"" + std::string(p) + "\"");
    pos_ += p.size();
  }
  void space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void skip_to(std::string_view end, const char* what) {
    const std::size_t at = s_.find(end, pos_);
    if (at == std::string_view::npos) fail(std::string("unterminated ") + what);
    check_chars(s_.substr(pos_, at - pos_));
    pos_ = at + end.size();
  }
  void check_chars(std::string_view text) const {
    for (char c : text) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 && c != '\t' && c != '\n' && c != '\r') fail("control character");
    }
  }
  void comment() {
    expect("<!--");
    const std::size_t at = s_.find("--", pos_);
    if (at == std::string_view::npos || s_.substr(at, 3) != "-->") fail("\"--\" inside a comment");
    pos_ = at + 3;
  }
  void misc() {
    for (;;) {
      space();
      if (starts("<!--")) {
        comment();
      } else if (starts("<?")) {
        skip_to("?>", "processing instruction");
      } else {
        return;
      }
    }
  }
  void prolog() {
    misc();
    if (starts("<!DOCTYPE")) {
      if (s_.find('[', pos_) < s_.find('>', pos_)) fail("internal DTD subsets are not checked");
      skip_to(">", "DOCTYPE");
      misc();
    }
  }
  static bool name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           static_cast<unsigned char>(c) >= 0x80;
  }
  static bool name_char(char c) {
    return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
  }
  std::string name() {
    if (pos_ >= s_.size() || !name_start(s_[pos_])) fail("expected a name");
    const std::size_t start = pos_;
    while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }
  void reference() {
    expect("&");
    const std::size_t end = s_.find(';', pos_);
    if (end == std::string_view::npos || end - pos_ > 10) fail("'&' outside a reference");
    const std::string_view ref = s_.substr(pos_, end - pos_);
    static const std::set<std::string_view> kNamed = {"lt", "gt", "amp", "quot", "apos"};
    bool ok = kNamed.count(ref) > 0;
    if (!ok && ref.size() > 1 && ref[0] == '#') {
      const bool hex = ref[1] == 'x';
      const std::string_view digits = ref.substr(hex ? 2 : 1);
      ok = !digits.empty();
      for (char c : digits) {
        ok = ok && ((c >= '0' && c <= '9') ||
                    (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))));
      }
    }
    if (!ok) fail("unknown reference &" + std::string(ref) + ";");
    pos_ = end + 1;
  }
  void attributes() {
    std::set<std::string> seen;
    for (;;) {
      const std::size_t before = pos_;
      space();
      if (starts("/>") || starts(">")) return;
      if (pos_ == before) fail("expected whitespace before an attribute");
      const std::string attr = name();
      if (!seen.insert(attr).second) fail("attribute " + attr + " repeated");
      space();
      expect("=");
      space();
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) {
        fail("attribute " + attr + " is not quoted");
      }
      const char quote = s_[pos_++];
      while (pos_ < s_.size() && s_[pos_] != quote) {
        if (s_[pos_] == '<') fail("'<' in attribute " + attr);
        if (s_[pos_] == '&') {
          reference();
        } else {
          check_chars(s_.substr(pos_, 1));
          ++pos_;
        }
      }
      expect(std::string_view(&quote, 1));
    }
  }
  void element() {
    expect("<");
    const std::string tag = name();
    ++elements_;
    attributes();
    if (starts("/>")) {
      pos_ += 2;
      return;
    }
    expect(">");
    for (;;) {
      if (pos_ >= s_.size()) fail("<" + tag + "> is never closed");
      if (starts("</")) {
        pos_ += 2;
        const std::string end = name();
        if (end != tag) fail("</" + end + "> closes <" + tag + ">");
        space();
        expect(">");
        return;
      }
      if (starts("<!--")) {
        comment();
      } else if (starts("<![CDATA[")) {
        skip_to("]]>", "CDATA section");
      } else if (starts("<?")) {
        skip_to("?>", "processing instruction");
      } else if (starts("<")) {
        element();
      } else if (starts("&")) {
        reference();
      } else if (starts("]]>")) {
        fail("\"]]>\" in text");
      } else {
        check_chars(s_.substr(pos_, 1));
        ++pos_;
      }
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  int elements_ = 0;
};

inline std::string xml_error(std::string_view text) { return XmlChecker(text).error(); }

// The <svg ...>...</svg> fragments of a page (SVG elements do not nest in the report).
inline std::vector<std::string_view> svg_fragments(std::string_view html) {
  std::vector<std::string_view> out;
  for (std::size_t at = html.find("<svg"); at != std::string_view::npos;
       at = html.find("<svg", at + 1)) {
    const std::size_t end = html.find("</svg>", at);
    if (end == std::string_view::npos) {
      out.push_back(html.substr(at));
      break;
    }
    out.push_back(html.substr(at, end + 6 - at));
  }
  return out;
}

}  // namespace skipsoftmax::test
