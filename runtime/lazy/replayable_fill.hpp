#pragma once
// Custom loads a TinyJit step may replay (the gathers behind index_select, gather and Embedding,
// and their gradients' scatters, bitcast's copy). A CUSTOM load's fill is a host function; where it
// reads nothing but its input buffers and checks what it reads itself, running it again on a
// replay's buffers is the step again, so a capture records it beside the kernels (schedule.cpp) and
// the replay calls it in its turn (jit.cpp). Any other fill still makes the capture refuse the
// step. Private to the library's sources.
#include <functional>
#include <utility>
#include <vector>

#include "metagrad/device.hpp"

namespace metagrad {

// Marks a fill as replayable: std::function::target<ReplayableFill>() finds it, no field added to
// every CustomArg.
struct ReplayableFill {
  std::function<void(RawBuffer& out, const std::vector<RawBuffer*>& inputs)> fill;
  void operator()(RawBuffer& out, const std::vector<RawBuffer*>& inputs) const { fill(out, inputs); }
};

// A captured replayable load as a program: buffer 0 its output, the rest its inputs in order.
class CustomProgram final : public Program {
 public:
  explicit CustomProgram(ReplayableFill f) : f_(std::move(f)) {}
  void operator()(const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                  const std::vector<RawBuffer*>& bufs) override {
    f_(*bufs[0], std::vector<RawBuffer*>(bufs.begin() + 1, bufs.end()));
  }
  const ReplayableFill& fill() const { return f_; }  // (an AOT capture emits some fills as C)

 private:
  ReplayableFill f_;
};

}  // namespace metagrad
