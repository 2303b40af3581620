// GRAPH=1's picture, checked in a child process (the SVG is laid out when a process exits): the DOT
// after every realize, kernels as clusters of the ops they fused (one per launch, labelled with the
// number and name DEBUG=2 prints for it), ops coloured by family, and, where Graphviz's dot is installed, an
// SVG that parses as XML with the DOT's nodes.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "child_process.hpp"
#include "device_scope.hpp"
#include "metagrad/metagrad.hpp"
#include "stderr_capture.hpp"

using namespace metagrad;
namespace fs = std::filesystem;
using i64 = std::int64_t;

namespace {

constexpr const char* kChild = "graph child process";

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Whether `s` is well-formed XML: one root element, elements closed in order, attribute values
// quoted, `<` never in text or values, `&` only as an entity. (Enough to catch a truncated or
// garbled SVG; no DTD processing.) `why` says what is wrong.
bool well_formed(const std::string& s, std::string& why) {
  std::vector<std::string> open;
  int roots = 0;
  auto entity_ok = [&](std::size_t at) {
    static const std::regex entity(R"(^&(#[0-9]+|#x[0-9a-fA-F]+|[A-Za-z]+);)");
    return std::regex_search(s.begin() + static_cast<std::ptrdiff_t>(at), s.end(), entity);
  };
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '&' && !entity_ok(i)) return why = "a bare & at " + std::to_string(i), false;
    if (s[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(s[i])))
        return why = "text outside the root at " + std::to_string(i), false;
      ++i;
      continue;
    }
    auto skip_to = [&](const char* end) {
      std::size_t e = s.find(end, i);
      if (e == std::string::npos) return false;
      i = e + std::strlen(end);
      return true;
    };
    if (s.compare(i, 2, "<?") == 0) {
      if (!skip_to("?>")) return why = "an unclosed <?", false;
    } else if (s.compare(i, 4, "<!--") == 0) {
      if (!skip_to("-->")) return why = "an unclosed comment", false;
    } else if (s.compare(i, 2, "<!") == 0) {
      if (!skip_to(">")) return why = "an unclosed <!", false;
    } else if (s.compare(i, 2, "</") == 0) {
      std::size_t e = s.find('>', i);
      if (e == std::string::npos) return why = "an unclosed end tag", false;
      std::string name = s.substr(i + 2, e - i - 2);
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
      if (open.empty() || open.back() != name) return why = "</" + name + "> closes nothing open", false;
      open.pop_back();
      i = e + 1;
    } else {
      static const std::regex tag(
          R"(^<([A-Za-z_][\w.:-]*)((?:\s+[\w.:-]+\s*=\s*(?:"[^"<]*"|'[^'<]*'))*)\s*(/?)>)");
      std::smatch m;
      if (!std::regex_search(s.cbegin() + static_cast<std::ptrdiff_t>(i), s.cend(), m, tag))
        return why = "a malformed tag at " + s.substr(i, 40), false;
      if (open.empty() && ++roots > 1) return why = "two root elements", false;
      if (m[3].length() == 0) open.push_back(m[1]);
      i += static_cast<std::size_t>(m[0].length());
    }
  }
  if (!open.empty()) return why = "<" + open.back() + "> is never closed", false;
  return roots == 1 || (why = "no root element", false);
}

struct Dot {
  std::map<std::string, std::string> nodes;    // id -> attributes
  std::map<std::string, std::string> cluster;  // node id -> its cluster ("" outside)
  std::vector<std::pair<std::string, std::string>> edges;
  std::vector<std::string> clusters, cluster_labels;
};

Dot parse_dot(const std::string& text) {
  Dot d;
  std::istringstream in(text);
  std::string line, current;
  std::smatch m;
  static const std::regex node(R"(^\s*(\w+) \[(label=.*)\];$)"), edge(R"(^\s*(\w+) -> (\w+);$)"),
      sub(R"(^\s*subgraph (cluster_\w+) \{$)");
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, sub)) {
      d.clusters.push_back(current = m[1]);
    } else if (!current.empty() && std::regex_match(line, m, std::regex(R"re(^\s*label="([^"]*)";$)re"))) {
      d.cluster_labels.push_back(m[1]);
  }
  else if (std::regex_match(line, m, std::regex(R"(^\s*\}$)"))) { current.clear(); }
  else if (std::regex_match(line, m, node)) {
    REQUIRE(d.nodes.emplace(m[1], m[2]).second);  // each node once
    d.cluster[m[1]] = current;
  }
  else if (std::regex_match(line, m, edge)) { d.edges.emplace_back(m[1], m[2]); }
}
return d;
}

std::string attribute(const std::string& attrs, const std::string& name) {
  std::smatch m;
  if (std::regex_search(attrs, m, std::regex(name + R"(=\"([^\"]*)\")"))) return m[1];
  return "";
}

bool dot_installed() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((fs::path(dir) / "dot").c_str(), X_OK) == 0) return true;
  return false;
}

}  // namespace

TEST_CASE("graph child process", "[.][graph]") {
  const char* out = std::getenv("METAGRAD_TEST_CHILD_OUT");
  if (!out) return;  // only as a child of the test below
  Device::DEFAULT = "CLANG";
  GlobalCounters::reset();
  std::mt19937 gen(5);
  auto input = [&](const Dims& shape) {
    auto v = test::random_floats(static_cast<std::size_t>(prod(shape)), static_cast<unsigned>(gen()));
    return Tensor(v, shape, {.dtype = dtypes::float32}).realize();
  };
  Tensor a = input({4, 6}), b = input({4, 6}), w = input({6, 3});
  (a * b + 1).relu().sum(1).realize();       // elementwise fused into a reduce
  (a.softmax(-1) + b).realize();             // several kernels
  (a.matmul(w).relu() - 2).sum().realize();  // a contraction
  // A CONTIGUOUS of a realized contiguous buffer shares its memory: a load node, no kernel.
  LazyBuffer::loadop(LoadOps::CONTIGUOUS, a.shape(), a.dtype(), "CLANG", {}, {a.lazydata})->realize();
  (a.exp().cast(dtypes::int32).cast(dtypes::float32) * b).realize();  // casts
  std::ofstream(out) << GlobalCounters::kernel_count << "\n";
}

TEST_CASE("GRAPH=1 draws each kernel as a cluster of its ops, and writes the SVG at exit", "[graph]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  test::TempDir dir("metagrad_graph_test");
  REQUIRE(!dir.path.empty());
  fs::path dot = dir.path / "g.dot", svg = dir.path / "g.svg", out = dir.path / "kernels";
  std::vector<std::string> lines;
  {
    test::StderrCapture capture("2");  // the child's stderr too, its kernels' DEBUG=2 lines
    pid_t pid = test::spawn_child(kChild, {"GRAPH=1", "GRAPH_PATH=" + dot.string(),
                                           "METAGRAD_TEST_CHILD_OUT=" + out.string(), "THREADS=1"});
    REQUIRE(pid > 0);
    REQUIRE(test::wait_for(pid) == 0);
    lines = capture.lines();
  }
  std::ifstream k(out);
  i64 kernels = -1;
  k >> kernels;
  REQUIRE(kernels >= 6);
  std::string said;
  for (const auto& l : lines) said += l + "\n";
  INFO("the child said:\n" << said);
  REQUIRE(said.find("GRAPH=1: writing the graph to " + dot.string()) != std::string::npos);

  std::string text = slurp(dot);
  REQUIRE(text.rfind("digraph metagrad {", 0) == 0);
  Dot d = parse_dot(text);
  REQUIRE(static_cast<i64>(d.clusters.size()) == kernels);  // one cluster per launch
  // Each cluster is labelled with its kernel's number and name as DEBUG=2 printed them.
  std::map<i64, std::string> printed;
  std::smatch m;
  for (const auto& l : lines)
    if (std::regex_match(l, m, std::regex(R"(^\*\*\* +(\d+) (\S+) +arg .*)")))
      REQUIRE(printed.emplace(std::stoll(m[1]), m[2]).second);
  REQUIRE(d.cluster_labels.size() == d.clusters.size());
  std::set<i64> numbers;
  for (const auto& label : d.cluster_labels) {
    INFO(label);
    REQUIRE(std::regex_match(label, m, std::regex(R"(^kernel (\d+) (\S+) \(CLANG\)$)")));
    REQUIRE(printed.count(std::stoll(m[1])));
    REQUIRE(printed[std::stoll(m[1])] == m[2]);
    REQUIRE(numbers.insert(std::stoll(m[1])).second);
  }
  // Every edge joins declared nodes; a cluster's nodes are its ops and its buffer reads, with one
  // edge out of it (its root, to the buffer it writes) and reads fed by buffers outside.
  std::map<std::string, int> out_of_cluster, into_read;
  for (const auto& [from, to] : d.edges) {
    INFO(from << " -> " << to);
    REQUIRE(d.nodes.count(from));
    REQUIRE(d.nodes.count(to));
    const std::string &cf = d.cluster[from], &ct = d.cluster[to];
    if (!cf.empty() && cf != ct) {
      REQUIRE(ct.empty());
      REQUIRE(attribute(d.nodes[to], "label").rfind("(", 0) == 0);  // a buffer: its shape and dtype
      ++out_of_cluster[cf];
    }
    if (cf.empty() && !ct.empty()) ++into_read[to];
  }
  for (const auto& c : d.clusters) REQUIRE(out_of_cluster[c] == 1);
  std::map<std::string, std::string> family_colour, colour_family;  // each family one colour, distinct
  for (const auto& [id, attrs] : d.nodes) {
    INFO(id << " " << attrs);
    std::string lbl = attribute(attrs, "label");
    if (d.cluster[id].empty()) continue;
    if (lbl.rfind("buffer ", 0) == 0) {
      REQUIRE(into_read[id] == 1);  // a read of one buffer
      continue;
    }
    std::string family = lbl.substr(0, lbl.find('.')), fill = attribute(attrs, "fillcolor");
    REQUIRE(family.size() > 3);
    REQUIRE(family.substr(family.size() - 3) == "Ops");
    REQUIRE(!fill.empty());
    REQUIRE(family_colour.emplace(family, fill).first->second == fill);
    REQUIRE(colour_family.emplace(fill, family).first->second == family);
  }
  REQUIRE(family_colour.count("BinaryOps"));
  REQUIRE(family_colour.count("ReduceOps"));
  REQUIRE(family_colour.count("UnaryOps"));
  // The buffer a's CONTIGUOUS shares is a load node outside every cluster.
  bool shared = false;
  for (const auto& [id, attrs] : d.nodes)
    shared |= d.cluster[id].empty() && attribute(attrs, "label").rfind("LoadOps.CONTIGUOUS", 0) == 0;
  REQUIRE(shared);

  if (!dot_installed()) {
    WARN("Graphviz's dot is not installed: the SVG is not checked (tools/setup.sh installs it)");
    REQUIRE(said.find("GRAPH=1: no SVG") != std::string::npos);
    return;
  }
  REQUIRE(said.find("GRAPH=1: wrote the SVG to " + svg.string()) != std::string::npos);
  std::string image = slurp(svg), why;
  INFO(why);
  REQUIRE(well_formed(image, why));
  REQUIRE(image.find("<svg") != std::string::npos);
  std::set<std::string> titles;  // a node's group: <g id="node3" class="node">\n<title>ID</title>
  std::regex node_group(R"(<g id="node\d+" class="node">\s*<title>([^<]*)</title>)");
  for (auto it = std::sregex_iterator(image.begin(), image.end(), node_group); it != std::sregex_iterator();
       ++it)
    REQUIRE(titles.insert((*it)[1]).second);
  std::set<std::string> ids;
  for (const auto& [id, attrs] : d.nodes) ids.insert(id);
  REQUIRE(titles == ids);  // the SVG has exactly the DOT's nodes
  std::regex cluster_group(R"(<g id="clust\d+" class="cluster">\s*<title>([^<]*)</title>)");
  std::set<std::string> svg_clusters;
  for (auto it = std::sregex_iterator(image.begin(), image.end(), cluster_group);
       it != std::sregex_iterator(); ++it)
    svg_clusters.insert((*it)[1]);
  REQUIRE(svg_clusters == std::set<std::string>(d.clusters.begin(), d.clusters.end()));
}

TEST_CASE("the XML check used on GRAPH=1's SVG rejects what is not XML", "[graph]") {
  std::string why;
  REQUIRE(well_formed(
      "<?xml version=\"1.0\"?>\n<!DOCTYPE svg>\n<svg a=\"1\"><g><title>x &amp; y</title></g><p/></svg>\n",
      why));
  for (const char* bad : {"<svg><g></svg></g>", "<svg>", "<svg a=1></svg>", "<svg>a & b</svg>",
                          "<a></a><b></b>", "<svg><g a=\"<\"></g></svg>", "x<svg></svg>", ""}) {
    INFO(bad);
    REQUIRE(!well_formed(bad, why));
  }
}
