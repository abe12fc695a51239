// The Explore tab's pages, one row each, in tab order: the name showPage and --tab take, other
// names --tab accepts, the tab's title and tooltip, which models have it, and how it is made.
// Adding a page is a row here plus its widget (an ExplorePage) and its test.
#pragma once

#include <QString>
#include <QStringList>
#include <vector>

namespace attnlab {

class ExploreView;
}  // namespace attnlab
class QWidget;
namespace attnlab {
struct ModelConfig;

struct ExplorePageRow {
  const char* name;                       // "heads"
  const char* aliases;                    // other names, comma-separated ("beyond,beyond-attention")
  const char* title;                      // the tab's text
  const char* tooltip;                    // the tab's tooltip ("" for none)
  bool (*available)(const ModelConfig&);  // null: every model; else the tab is hidden for others
  const char* unavailable;                // why it is hidden (for --tab)
  bool from_probabilities;                // reads probabilities only: works on an attention file
  QWidget* (*make)(ExploreView& view);    // the page, wired to view.state()
};

const std::vector<ExplorePageRow>& explore_pages();
// By name or alias; null for neither.
const ExplorePageRow* find_explore_page(const QString& name);
QStringList explore_page_names();  // in tab order

}  // namespace attnlab
