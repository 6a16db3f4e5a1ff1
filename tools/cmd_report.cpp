// skipsoftmax report --price-json A.json [B.json ...] --out report.html [--title T]: one
// self-contained HTML page (inline CSS and SVG charts) from the price lists of one or more models.
// Every input is read and validated before anything is written; the page is written atomically.
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "file_io.h"
#include "price.h"
#include "report.h"

namespace skipsoftmax::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> price_files;
  std::string out;
  std::string title = "Skip-softmax price report";
};

void run_report(const ReportOptions& o) {
  check_output_file(o.out);
  std::vector<ReadPath> inputs;
  for (const std::string& file : o.price_files) inputs.push_back({"a --price-json", file});
  check_not_an_input(o.out, "--out", inputs);
  std::vector<ReportModel> models;
  for (const std::string& file : o.price_files) models.push_back({read_price_file(file), file});
  const std::string html = render_report(models, o.title);
  write_file_atomic(o.out, [&](std::ostream& out) { out << html; });
  std::cout << "wrote " << o.out << " (" << models.size()
            << (models.size() == 1 ? " model, " : " models, ") << html.size() << " bytes)\n";
}

void add_report(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* sub = app.add_subcommand(
      "report", "HTML report (charts, tables, recommendation) from price.json files");
  sub->add_option("--price-json", o->price_files,
                  "price.json of a model (docs/REPORT.md); repeatable")
      ->required();
  sub->add_option("--out", o->out, "The HTML page to write")->required();
  sub->add_option("--title", o->title, "Page title");
  sub->callback([o] { run_report(*o); });
}

const Registration reg{60, &add_report};

}  // namespace
}  // namespace skipsoftmax::cli
