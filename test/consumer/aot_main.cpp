// Calls the AOT library (libc and libm only) and checks it against a plain C++ softmax(x @ w).
#include <consumer_model.h>
#include <cmath>

int main() {
  float x[6] = {0.5f, -1, 2, 0, 1.5f, -0.25f}, w[12], out[8];
  for (int i = 0; i < 12; ++i) w[i] = 0.1f * static_cast<float>(i) - 0.4f;
  consumer_softmax(x, w, out);
  for (int r = 0; r < 2; ++r) {
    double z[4], m = -1e30, s = 0;
    for (int c = 0; c < 4; ++c) {
      z[c] = 0;
      for (int k = 0; k < 3; ++k) z[c] += double(x[r * 3 + k]) * w[k * 4 + c];
      m = std::fmax(m, z[c]);
    }
    for (double v : z) s += std::exp(v - m);
    for (int c = 0; c < 4; ++c)
      if (std::fabs(out[r * 4 + c] - std::exp(z[c] - m) / s) > 1e-5) return 1;
  }
  return 0;
}
