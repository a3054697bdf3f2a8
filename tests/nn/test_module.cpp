#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/init.hpp"
#include "accel/nn/module.hpp"
#include "accel/nn/set_tensor.hpp"
#include "accel/nn/tied.hpp"

using namespace accel;
using accel::nn::Module;

namespace {
std::shared_ptr<Module> leaf(const std::string& cls, Shape w, bool with_buffer = false) {
  auto m = std::make_shared<Module>(cls);
  m->register_parameter("weight", Tensor::zeros(w));
  if (with_buffer) m->register_buffer("running", Tensor::zeros({2}), /*persistent=*/false);
  return m;
}
std::vector<std::string> names(const Module::Named<Tensor>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("Module registers tensors and children in order and finds them by dotted path", "[nn][module]") {
  auto root = std::make_shared<Module>("Root");
  root->register_parameter("scale", Tensor::ones({3}));
  auto a = root->register_module("a", leaf("Linear", {2, 2}, true));
  auto b = root->register_module("b", std::make_shared<Module>("Block"));
  b->register_module("inner", leaf("Linear", {4, 2}));
  root->register_buffer("step", Tensor::zeros({}, DType::i64));

  CHECK(names(root->named_parameters()) == std::vector<std::string>{"scale", "a.weight", "b.inner.weight"});
  CHECK(names(root->named_buffers()) == std::vector<std::string>{"step", "a.running"});
  CHECK(names(root->state_dict()) == std::vector<std::string>{"scale", "step", "a.weight", "b.inner.weight"});
  CHECK(root->get_submodule("b.inner").class_name() == "Linear");
  CHECK(root->get_parameter("b.inner.weight").shape() == Shape{4, 2});
  CHECK(root->get_buffer("a.running").numel() == 2);
  CHECK_THROWS_AS(root->get_submodule("b.nope"), KeyError);
  CHECK_THROWS_AS(root->get_parameter("a.bias"), KeyError);
  CHECK_THROWS_AS(root->register_parameter("a", Tensor::zeros({1})), KeyError);  // a child's name
  CHECK_THROWS_AS(root->register_parameter("x.y", Tensor::zeros({1})), KeyError);
  auto mods = root->named_modules();
  REQUIRE(mods.size() == 4);
  CHECK(mods[3].first == "b.inner");
  CHECK(root->parameters().size() == 3);
}

TEST_CASE("A module registered twice is met once by de-duplicating traversals", "[nn][module]") {
  auto seq = std::make_shared<nn::Sequential>();
  auto layer = leaf("Linear", {2, 2});
  seq->push_back(layer);
  seq->push_back(layer);
  CHECK(seq->named_children().size() == 1);
  CHECK(names(seq->named_parameters()) == std::vector<std::string>{"0.weight"});
  CHECK(names(seq->named_parameters("", true, false)) == std::vector<std::string>{"0.weight", "1.weight"});
  CHECK(names(seq->state_dict()) == std::vector<std::string>{"0.weight", "1.weight"});
  const auto tied = nn::find_tied_parameters(*seq);
  REQUIRE(tied.size() == 1);
  CHECK(tied[0] == std::vector<std::string>{"0.weight", "1.weight"});
}

TEST_CASE("Tied parameters share a cell: replacing the tensor keeps the tie", "[nn][module][tied]") {
  auto root = std::make_shared<Module>("M");
  auto emb = root->register_module("emb", leaf("Embedding", {5, 3}));
  auto head = root->register_module("head", leaf("Linear", {5, 3}));
  head->register_parameter("weight", emb->parameter_cell("weight"));
  CHECK(names(root->named_parameters()) == std::vector<std::string>{"emb.weight"});
  CHECK(nn::find_tied_parameters(*root) == std::vector<std::vector<std::string>>{{"emb.weight", "head.weight"}});

  root->parameter_cell("emb.weight")->data = Tensor::ones({5, 3});
  CHECK(root->get_parameter("head.weight").at<float>({4, 2}) == 1.0f);

  // Breaking the tie, then re-making it from the first materialised name.
  root->parameter_cell("head.weight") = std::make_shared<nn::Parameter>(nn::Parameter{Tensor::zeros({5, 3}).to_meta(), true});
  CHECK(nn::find_tied_parameters(*root).empty());
  nn::retie_parameters(*root, {{"emb.weight", "head.weight"}});
  CHECK(root->parameter_cell("head.weight") == root->parameter_cell("emb.weight"));
}

TEST_CASE("to() moves every tensor once and casts only floating ones", "[nn][module]") {
  auto root = std::make_shared<Module>("M");
  root->register_parameter("w", Tensor::ones({2, 2}));
  root->register_buffer("idx", Tensor::zeros({3}, DType::i64));
  auto child = root->register_module("c", std::make_shared<Module>("C"));
  child->register_parameter("w", root->parameter_cell("w"));
  root->to(Device::cpu(), DType::f16);
  CHECK(root->get_parameter("w").dtype() == DType::f16);
  CHECK(root->get_buffer("idx").dtype() == DType::i64);
  CHECK(root->parameter_cell("c.w") == root->parameter_cell("w"));
  root->to(Device::meta());
  CHECK(root->get_parameter("c.w").is_meta());
  int visited = 0;
  root->apply([&](Module&) { ++visited; });
  CHECK(visited == 2);
}

TEST_CASE("The hook slot wraps forward", "[nn][module]") {
  struct Doubler : Module {
    Doubler() : Module("Doubler") {}
    Tensor forward(const Tensor& x) override { return x; }
  };
  struct Hook : nn::ModuleHook {
    int pre = 0, post = 0;
    void pre_forward(Module&, const nn::TensorRefs& args) override {
      ++pre;
      CHECK(args.size() == 1);
    }
    void post_forward(Module&, const nn::TensorRefs& outputs) override {
      ++post;
      outputs.for_each([](Tensor& y) { y = Tensor::full(y.shape(), 7.0); });
    }
  };
  Doubler d;
  auto hook = std::make_shared<Hook>();
  d.set_hook(hook);
  Tensor y = d(Tensor::ones({2}));
  CHECK(hook->pre == 1);
  CHECK(hook->post == 1);
  CHECK(y.at<float>({1}) == 7.0f);
  Module plain("Plain");
  CHECK_THROWS_AS(plain(Tensor::ones({1})), ValueError);
}

TEST_CASE("set_module_tensor_to_device follows Accelerate's casting and shape rules", "[nn][set_tensor]") {
  auto root = std::make_shared<Module>("M");
  {
    auto guard = nn::init_empty_weights(true);
    root->register_parameter("w", Tensor::zeros({2, 3}, DType::f16));
    root->register_buffer("ids", Tensor::zeros({4}, DType::i64));
  }
  CHECK(root->get_parameter("w").is_meta());
  CHECK_THROWS_AS(nn::set_module_tensor_to_device(*root, "w", Device::cpu()), ValueError);
  try {
    nn::set_module_tensor_to_device(*root, "w", Device::cpu(), Tensor::ones({3, 2}));
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("\"w\"") != std::string::npos);
    CHECK(msg.find("[3, 2]") != std::string::npos);
    CHECK(msg.find("[2, 3]") != std::string::npos);
  }
  nn::set_module_tensor_to_device(*root, "w", Device::cpu(), Tensor::ones({2, 3}));
  CHECK(root->get_parameter("w").dtype() == DType::f16);  // cast to the existing dtype
  nn::set_module_tensor_to_device(*root, "w", Device::cpu(), Tensor::ones({2, 3}), DType::bf16);
  CHECK(root->get_parameter("w").dtype() == DType::bf16);
  nn::set_module_tensor_to_device(*root, "ids", Device::cpu(), Tensor::zeros({4}, DType::i32), DType::f16);
  CHECK(root->get_buffer("ids").dtype() == DType::i32);  // integers are never cast to `dtype`
  CHECK(root->get_buffer("ids").is_cpu());
}

TEST_CASE("set_module_tensor_to_device with tied_params_map copies a tied weight once", "[nn][set_tensor][tied]") {
  auto make = [] {
    auto root = std::make_shared<Module>("M");
    auto guard = nn::init_empty_weights();
    auto emb = root->register_module("emb", leaf("Embedding", {5, 3}));
    auto head = root->register_module("head", leaf("Linear", {5, 3}));
    head->register_parameter("weight", emb->parameter_cell("weight"));
    return root;
  };
  // A checkpoint value in f16: placing it in the f32 model converts, so every placement allocates.
  std::vector<float> v(15);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 7.0f;
  const Tensor value = Tensor::from_vector(v, Shape{5, 3}).to(DType::f16);
  const std::size_t f32_bytes = 15 * 4;

  auto root = make();
  nn::TiedParamsMap tied;
  const MemoryStats before = memory_stats(Device::cpu());
  nn::set_module_tensor_to_device(*root, "emb.weight", Device::cpu(), value, std::nullopt, &tied);
  nn::set_module_tensor_to_device(*root, "head.weight", Device::cpu(), value, std::nullopt, &tied);
  const MemoryStats after = memory_stats(Device::cpu());
  CHECK(after.num_allocs - before.num_allocs == 1);
  CHECK(after.allocated_bytes - before.allocated_bytes == f32_bytes);
  CHECK(tied.size() == 1);
  const Tensor& emb = root->get_parameter("emb.weight");
  const Tensor& head = root->get_parameter("head.weight");
  CHECK(head.is_same(emb));
  CHECK(head.shares_storage(emb));
  CHECK(head.dtype() == DType::f32);
  CHECK(head.to_vector<float>() == v);
  CHECK(tied.at({root->parameter_cell("head.weight").get(), Device::cpu()}).is_same(emb));

  // Without the map the second name converts the value again (the first copy is then freed).
  auto untracked = make();
  const MemoryStats before2 = memory_stats(Device::cpu());
  nn::set_module_tensor_to_device(*untracked, "emb.weight", Device::cpu(), value);
  nn::set_module_tensor_to_device(*untracked, "head.weight", Device::cpu(), value);
  CHECK(memory_stats(Device::cpu()).num_allocs - before2.num_allocs == 2);

  // The map is per device: meta is a separate entry, and a later cpu placement reuses the first.
  nn::set_module_tensor_to_device(*root, "head.weight", Device::meta(), std::nullopt, std::nullopt, &tied);
  CHECK(tied.size() == 2);
  CHECK(root->get_parameter("emb.weight").is_meta());
  const MemoryStats before3 = memory_stats(Device::cpu());
  nn::set_module_tensor_to_device(*root, "emb.weight", Device::cpu(), value, std::nullopt, &tied);
  CHECK(memory_stats(Device::cpu()).num_allocs == before3.num_allocs);
  CHECK(root->get_parameter("head.weight").to_vector<float>() == v);
}

TEST_CASE("set_module_tensor_to_device with fp16_statistics sets the int8 layer's SCB", "[nn][set_tensor]") {
  auto root = std::make_shared<Module>("M");
  auto lin = root->register_module("q", leaf("Linear8bitLt", {2, 3}));
  lin->register_buffer("SCB", Tensor::empty({2}, DType::f32, Device::meta()));
  auto other = root->register_module("norm", leaf("RMSNorm", {3}));
  const Tensor codes = Tensor::from_vector(std::vector<std::int8_t>{1, -2, 3, 4, 5, -128}, Shape{2, 3});
  const Tensor stats = Tensor::from_vector(std::vector<float>{0.5f, 2.0f}).to(DType::f16);
  lin->parameter_cell("weight")->data = Tensor::zeros({2, 3}, DType::i8);
  nn::set_module_tensor_to_device(*root, "q.weight", Device::cpu(), codes, std::nullopt, stats);
  CHECK(root->get_parameter("q.weight").dtype() == DType::i8);
  CHECK(root->get_buffer("q.SCB").dtype() == DType::f32);
  CHECK(root->get_buffer("q.SCB").to_vector<float>() == std::vector<float>{0.5f, 2.0f});
  // Without the statistics, the same call as before; a module without SCB is refused by name.
  nn::set_module_tensor_to_device(*root, "q.weight", Device::cpu(), codes, std::nullopt, std::nullopt);
  CHECK_THROWS_WITH(nn::set_module_tensor_to_device(*root, "norm.weight", Device::cpu(), Tensor::ones({3}), std::nullopt, stats),
                    Catch::Contains("norm.SCB") && Catch::Contains("fp16_statistics"));
  (void)other;
}
