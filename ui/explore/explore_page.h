// ExplorePage: one page of the Explore tab (hotspot's ResultsSummaryPage, ResultsBottomUpPage).
// A page reads the shared ExploreState and redraws itself when something it depends on changes:
// at once when it is eager (the Heads grid, the Lines) or shown, else the next time it is shown,
// so hidden pages cost nothing while the user types.
#pragma once

#include <QWidget>

#include "ui/explore/explore_state.h"

namespace attnlab {

class ExplorePage : public QWidget {
  Q_OBJECT
 public:
  enum Depends { OnResult = 1, OnLayer = 2, OnDisplay = 4, OnAblation = 8 };

  ExplorePage(ExploreState* state, int depends, bool eager, QWidget* parent = nullptr)
      : QWidget(parent), state_(state), eager_(eager) {
    connect(state, &ExploreState::modelChanged, this, [this] {
      modelChanged();
      invalidate();
    });
    if (depends & OnResult) connect(state, &ExploreState::resultChanged, this, &ExplorePage::invalidate);
    if (depends & OnLayer) connect(state, &ExploreState::layerChanged, this, &ExplorePage::invalidate);
    if (depends & OnDisplay) connect(state, &ExploreState::displayChanged, this, &ExplorePage::invalidate);
    if (depends & OnAblation) connect(state, &ExploreState::ablationChanged, this, &ExplorePage::invalidate);
  }

  // The composer says whether this page is the one shown; being shown redraws it if it is stale.
  void setCurrent(bool current) {
    current_ = current;
    if (current_ && dirty_) invalidate();
  }
  bool isCurrent() const { return current_; }
  // Redraws now when eager or shown, else marks the page stale.
  void invalidate() {
    dirty_ = !(eager_ || current_);
    if (!dirty_) refresh();
  }

 protected:
  virtual void refresh() = 0;     // draws the state (a null result: the page clears itself)
  virtual void modelChanged() {}  // rebuilds what depends on the model's shape
  ExploreState* state_;

 private:
  bool eager_, current_ = false, dirty_ = true;
};

}  // namespace attnlab
