#include <catch2/catch.hpp>

#include <string>

#include "accel/core/limits.hpp"
#include "accel/nn/spec.hpp"
#include "accel/nn/tied.hpp"

using namespace accel;
using json = nlohmann::json;

namespace {
json toy() {
  return json::parse(R"({
    "format": "accelerate-oracle-spec/v1", "no_split_modules": ["Block"],
    "root": {"name": "", "class": "Toy", "params": [{"name": "scale", "shape": [2]}],
      "buffers": [{"name": "step", "shape": [], "dtype": "int64"},
                  {"name": "cache", "shape": [3], "persistent": false}],
      "children": [
        {"name": "0", "class": "Block", "params": [{"name": "weight", "shape": [4, 2], "dtype": "float16"}]},
        {"name": "1", "alias_of": "0"},
        {"name": "head", "class": "Linear", "params": [{"name": "weight", "shape": [4, 2], "dtype": "float16"}]}
      ]},
    "tied": [["0.weight", "head.weight"]]})");
}
}  // namespace

TEST_CASE("module_from_spec builds a meta tree with buffers, aliases and ties", "[nn][spec]") {
  auto m = nn::module_from_spec(toy(), "toy.json");
  CHECK(m->class_name() == "Toy");
  CHECK(m->no_split_modules() == std::vector<std::string>{"Block"});
  CHECK(m->get_parameter("scale").is_meta());
  CHECK(m->get_parameter("0.weight").dtype() == DType::f16);
  CHECK(&m->get_submodule("1") == &m->get_submodule("0"));
  CHECK(m->parameter_cell("head.weight") == m->parameter_cell("0.weight"));
  CHECK(m->state_dict().size() == 5);  // scale, step, 0.weight, 1.weight, head.weight (cache is not persistent)
  CHECK(m->named_buffers().size() == 2);
  CHECK(m->get_buffer("step").dtype() == DType::i64);
  CHECK_FALSE(m->parameter_cell("scale") == nullptr);
  const auto groups = nn::find_tied_parameters(*m);
  REQUIRE(groups.size() == 1);
  CHECK(groups[0] == std::vector<std::string>{"0.weight", "1.weight", "head.weight"});
}

TEST_CASE("module_from_spec errors name the file and the JSON path", "[nn][spec]") {
  auto expect_error = [](json j, const std::string& fragment) {
    try {
      nn::module_from_spec(j, "bad.json");
      FAIL("expected FormatError");
    } catch (const FormatError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find("bad.json") != std::string::npos);
      CHECK(msg.find(fragment) != std::string::npos);
    }
  };
  json j = toy();
  j["format"] = "other";
  expect_error(j, "$.format");
  j = toy();
  j["root"]["children"][0]["params"][0]["shape"][1] = -2;
  expect_error(j, "$.root.children[0].params[0].shape[1]");
  j = toy();
  j["root"]["children"][2]["params"][0]["dtype"] = "float17";
  expect_error(j, "$.root.children[2].params[0].dtype");
  j = toy();
  j["root"]["children"][1]["alias_of"] = "nowhere";
  expect_error(j, "$.root.children[1].alias_of");
  j = toy();
  j["tied"] = json::parse(R"([["0.weight", "scale"]])");
  expect_error(j, "$.tied[0][1]");
  j = toy();
  j["root"]["children"][0]["name"] = "a.b";
  expect_error(j, "$.root.children[0].name");
  CHECK_THROWS_AS(nn::module_from_spec_file("/nonexistent/spec.json"), IOError);
}

TEST_CASE("module_from_spec bounds nesting and name length instead of recursing without limit", "[nn][spec]") {
  // A chain of modules nested one level deeper than the limit: refused before the builder's
  // recursion could exhaust the stack.
  const auto chain = [](std::size_t levels) {
    json leaf = {{"name", "m"}, {"class", "Leaf"}, {"params", json::array({{{"name", "w"}, {"shape", {1}}}})}};
    for (std::size_t i = 1; i < levels; ++i) leaf = {{"name", "m"}, {"class", "Block"}, {"children", json::array({leaf})}};
    json root = {{"name", ""}, {"class", "Root"}, {"children", json::array({leaf})}};
    return json{{"format", "accelerate-oracle-spec/v1"}, {"root", root}};
  };
  CHECK_NOTHROW(nn::module_from_spec(chain(limits::max_module_depth - 1), "deep.json"));
  CHECK_THROWS_WITH(nn::module_from_spec(chain(limits::max_module_depth + 1), "deep.json"),
                    Catch::Contains("deep.json") && Catch::Contains("deeper than 256 levels"));
  json j = toy();
  j["root"]["children"][0]["name"] = std::string(limits::max_name_bytes + 1, 'n');
  CHECK_THROWS_WITH(nn::module_from_spec(j, "long.json"),
                    Catch::Contains("long.json") && Catch::Contains("$.root.children[0].name") &&
                        Catch::Contains("4097 bytes"));
}

TEST_CASE("Every public conformance spec builds", "[nn][spec]") {
  for (const char* name : {"gpt2_tiny", "llama_tiny", "mixed_dtypes", "toy_nested", "toy_tied_1group"}) {
    auto m = nn::module_from_spec_file(std::string(ACCEL_SHARED_DIR) + "/conformance/accelerate/specs/" + name + ".json");
    CHECK_FALSE(m->named_parameters().empty());
  }
}
