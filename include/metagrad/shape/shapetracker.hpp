#pragma once
// ShapeTracker: a stack of Views (the seed's shape/shapetracker). Movement ops edit the top view
// when it can express them and push a new view when it cannot; expr_idxs renders where each
// output position reads, as symbolic index and validity expressions, so no movement op copies.
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "metagrad/shape/symbolic.hpp"
#include "metagrad/shape/view.hpp"

namespace metagrad {

class ShapeTracker {
 public:
  explicit ShapeTracker(const Dims& shape) : views_{View(shape)} {}
  // So that ShapeTracker({100}) means a shape, not a list of views.
  ShapeTracker(std::initializer_list<std::int64_t> shape) : ShapeTracker(Dims(shape)) {}
  explicit ShapeTracker(std::vector<View> views);

  const std::vector<View>& views() const { return views_; }
  const Dims& shape() const { return views_.back().shape; }
  std::int64_t size() const { return views_.back().size(); }
  // Reading it in order is reading the buffer in order: one view, row-major, no offset, no mask.
  bool contiguous() const { return views_.size() == 1 && views_[0].contiguous; }

  // The six movement ops mutate and return *this; bad arguments throw std::invalid_argument.
  ShapeTracker& reshape(const Dims& new_shape);
  ShapeTracker& permute(const Dims& axes);
  ShapeTracker& expand(const Dims& new_shape);
  ShapeTracker& pad(const Pairs& arg);
  ShapeTracker& shrink(const Pairs& arg);
  ShapeTracker& stride(const Dims& mul);
  // Merge adjacent views wherever the pair is expressible as one view.
  ShapeTracker& simplify();

  // (index, valid) for positions given per dimension (default: variables idx0..idxN-1 over the shape).
  std::pair<symbolic::Node, symbolic::Node> expr_idxs(
      std::optional<std::vector<symbolic::Node>> idxs = {}) const;
  // (index, valid) for a single flat position named `name`, in [0, size).
  std::pair<symbolic::Node, symbolic::Node> expr_node(const std::string& name = "idx") const;

  // Per-dimension stride of the whole stack where it is a plain stride (nullopt where it is not,
  // or where the dimension is masked), and the buffer offset of position 0.
  std::vector<std::optional<std::int64_t>> real_strides() const;

  friend bool operator==(const ShapeTracker&, const ShapeTracker&) = default;

 private:
  std::vector<View> views_;
};

std::string to_string(const ShapeTracker& st);
inline std::ostream& operator<<(std::ostream& os, const ShapeTracker& st) { return os << to_string(st); }
inline std::ostream& operator<<(std::ostream& os, const View& v) { return os << to_string(v); }

// The single view equal to `below` then `above` (above's shape), when there is one.
std::optional<View> merge_views(const View& below, const View& above);

}  // namespace metagrad
