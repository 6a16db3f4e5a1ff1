// The HTML report of one or more price lists (`skipsoftmax report`): one self-contained page, with
// inline CSS and inline SVG charts, no script and no external reference (a Content-Security-
// Policy forbids any), written as polyglot markup: it parses as HTML and as XHTML alike. Every
// text from the price lists is escaped.
#pragma once

#include <string>
#include <vector>

#include "price.h"

namespace skipsoftmax {

struct ReportModel {
  PriceList price;
  std::string source;  // the file it came from, shown with the provenance
};

// The page. Throws std::invalid_argument for no model.
std::string render_report(const std::vector<ReportModel>& models, const std::string& title);

}  // namespace skipsoftmax
