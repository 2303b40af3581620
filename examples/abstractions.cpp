// The seed's walk down the abstraction stack (../shared/WALKTHROUGH.md), printed step by step.
// Every claim the walk makes is checked here too, in any build type, so a wrong result fails loudly.
#include <cstdlib>
#include <iostream>
#include <metagrad/metagrad.hpp>
#include <string>

using namespace metagrad;

static void check(bool ok, const std::string& claim) {
  if (ok) return;
  std::cerr << "abstractions: the walk says " << claim << ", but it does not hold\n";
  std::exit(1);
}

template <class A, class B>
static void show(const A& value, const B& expected) {
  std::cout << value << "\n";
  check(value == expected, std::string("this prints ") + expected);
}

static void shapetracker_walk() {
  std::cout << "\n## 5. ShapeTracker\n";
  ShapeTracker a({10, 10});
  show(to_string(a), "ShapeTracker(shape=(10, 10), views=[View((10, 10), (10, 1), 0)])");

  std::cout << "permute((1, 0)): the strides change\n";
  show(to_string(a.permute({1, 0})), "ShapeTracker(shape=(10, 10), views=[View((10, 10), (1, 10), 0)])");

  std::cout << "reshape((5, 2, 5, 2)): the permute stays applied\n";
  show(to_string(a.reshape({5, 2, 5, 2})),
       "ShapeTracker(shape=(5, 2, 5, 2), views=[View((5, 2, 5, 2), (2, 1, 20, 10), 0)])");

  std::cout << "reshape((100,)): a second view\n";
  show(to_string(a.reshape({100})),
       "ShapeTracker(shape=(100,), views=[View((5, 2, 5, 2), (2, 1, 20, 10), 0), View((100,), (1,), 0)])");
  auto [idx, valid] = a.expr_idxs();
  show(idx.render(), "(((idx0%10)*10)+(idx0//10))");

  std::cout << "reshape((10, 10)): the index is simple again, still two views\n";
  a.reshape({10, 10});
  show(a.expr_idxs().first.render(), "((idx1*10)+idx0)");
  show(to_string(a),
       "ShapeTracker(shape=(10, 10), views=[View((5, 2, 5, 2), (2, 1, 20, 10), 0), View((10, 10), (10, 1), "
       "0)])");

  std::cout << "simplify(): one view\n";
  show(to_string(a.simplify()), "ShapeTracker(shape=(10, 10), views=[View((10, 10), (1, 10), 0)])");

  std::cout << "permute((1, 0)) back: contiguous\n";
  show(to_string(a.permute({1, 0})), "ShapeTracker(shape=(10, 10), views=[View((10, 10), (10, 1), 0)])");
  check(a.contiguous(), "a.contiguous()");
  std::cout << "contiguous: " << std::boolalpha << a.contiguous() << "\n";
}

static void symbolic_walk() {
  using namespace metagrad::symbolic;
  std::cout << "\n## 6. Symbolic\n";
  Node a = Variable("a", 0, 10);
  Node b = Variable("b", 0, 10);
  std::cout << "(a*10): " << (a * 10).min() << " " << (a * 10).max() << "\n";
  check((a * 10).min() == 0 && (a * 10).max() == 100, "(a*10) spans 0..100");
  std::cout << "(a+b): " << (a + b).min() << " " << (a + b).max() << "\n";
  check((a + b).min() == 0 && (a + b).max() == 20, "(a+b) spans 0..20");

  std::cout << "(a + b*10) % 10 = ";
  show(((a + b * 10) % 10).render(), "(a%10)");

  Node e = (a * 40 + b) / 20;
  std::cout << "(a*40 + b) // 20 = ";
  show(e.render(), "(a*2)");
  std::cout << "min, max: " << e.min() << " " << e.max() << "\n";
  check(e.min() == 0 && e.max() == 20, "(a*2) spans 0..20");
}

int main() {
  std::cout << "metagrad: the abstraction stack, from a Tensor down to a kernel\n";
  shapetracker_walk();
  symbolic_walk();
  std::cout << "\nevery claim of the walk holds\n";
}
