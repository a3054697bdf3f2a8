#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "accel/nn/containers.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/module.hpp"

using namespace accel;

namespace {
std::vector<std::string> names_of(const nn::Module::Named<Tensor>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("ModuleDict keeps insertion order and dotted names", "[nn][containers]") {
  auto root = std::make_shared<nn::Module>("Model");
  auto blocks = root->register_module("blocks", std::make_shared<nn::ModuleDict>());
  auto mlp = blocks->insert("mlp", std::make_shared<nn::Linear>(2, 3));
  blocks->insert("attn", std::make_shared<nn::Linear>(3, 2, /*bias=*/false));

  CHECK(blocks->class_name() == "ModuleDict");
  CHECK(blocks->size() == 2);
  CHECK(blocks->keys() == std::vector<std::string>{"mlp", "attn"});  // insertion order, not sorted
  CHECK(names_of(root->named_parameters()) ==
        std::vector<std::string>{"blocks.mlp.weight", "blocks.mlp.bias", "blocks.attn.weight"});
  CHECK(root->get_parameter("blocks.attn.weight").shape() == Shape{2, 3});
  CHECK(root->get_submodule("blocks.mlp").class_name() == "Linear");
  CHECK(root->named_modules()[1].first == "blocks");

  CHECK(blocks->contains("attn"));
  CHECK_FALSE(blocks->contains("blocks.attn"));
  CHECK(&blocks->at("mlp") == mlp.get());
  CHECK_THROWS_WITH(blocks->at("norm"), Catch::Contains("ModuleDict has no key 'norm'"));
  CHECK_THROWS_AS(blocks->at("norm"), KeyError);
}

TEST_CASE("ModuleDict replaces a key in place and rejects keys torch rejects", "[nn][containers]") {
  nn::ModuleDict d;
  d.insert("a", std::make_shared<nn::Linear>(1, 1));
  d.insert("b", std::make_shared<nn::Linear>(2, 2));
  auto replacement = d.insert("a", std::make_shared<nn::Linear>(4, 4));
  CHECK(d.size() == 2);
  CHECK(d.keys() == std::vector<std::string>{"a", "b"});  // the replaced key keeps its place
  CHECK(&d.at("a") == replacement.get());
  CHECK(d.get_parameter("a.weight").shape() == Shape{4, 4});

  // One module under two keys: both names exist, traversals that de-duplicate meet it once.
  d.insert("c", replacement);
  CHECK(d.keys() == std::vector<std::string>{"a", "b", "c"});
  CHECK(&d.at("c") == &d.at("a"));
  CHECK(names_of(d.named_parameters()) == std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias"});
  CHECK(names_of(d.state_dict()) ==
        std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias", "c.weight", "c.bias"});

  CHECK_THROWS_AS(d.insert("x.y", std::make_shared<nn::Linear>(1, 1)), KeyError);
  CHECK_THROWS_AS(d.insert("", std::make_shared<nn::Linear>(1, 1)), KeyError);
  CHECK_THROWS_AS(d.insert("z", std::shared_ptr<nn::Linear>()), ValueError);
  CHECK(d.size() == 3);
}
