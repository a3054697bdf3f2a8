// The one call path (nn/module.hpp): every entry fires the hook the same way, arguments keep
// their value category, hooks honour skip_keys, parents reach children through the tree's slots,
// and the execution device comes from the hook before the weights.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accel/nn/basic_module.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/module.hpp"
#include "accel/ops/ops.hpp"

using namespace accel;
using nn::Module;

namespace {

/// Counts calls and adds `bump` to every argument tensor it sees.
struct BumpHook : nn::ModuleHook {
  int pre = 0, post = 0;
  float bump = 0;
  std::size_t seen = 0;
  std::optional<Device> device;
  nested::skip_keys skip;
  void pre_forward(Module&, const nn::TensorRefs& args) override {
    ++pre;
    seen = 0;
    args.for_each(
        [&](Tensor& t) {
          ++seen;
          if (bump != 0 && t.defined()) t = ops::add(t, Tensor::full(t.shape(), bump, t.dtype()));
        },
        &skip);
  }
  void post_forward(Module&, const nn::TensorRefs&) override { ++post; }
  std::optional<Device> execution_device() const override { return device; }
};

struct Identity : nn::BasicModule<Identity> {
  Identity() : BasicModule("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

/// forward writes into a caller's tensor through a non-const reference.
struct WritesOut : nn::BasicModule<WritesOut> {
  WritesOut() : BasicModule("WritesOut") {}
  Tensor forward(const Tensor& x, Tensor& out) {
    out = ops::mul(x, Tensor::full(x.shape(), 10.0));
    return x;
  }
};

/// forward takes a move-only argument and a map of named tensors.
struct TakesMoveOnly : nn::BasicModule<TakesMoveOnly> {
  TakesMoveOnly() : BasicModule("TakesMoveOnly") {}
  Tensor forward(std::unique_ptr<int> n, const std::map<std::string, Tensor>& named) {
    Tensor s = Tensor::full({1}, static_cast<double>(*n));
    for (const auto& [k, t] : named) s = ops::add(s, t);
    return s;
  }
};

/// A parent calling one replaceable single-tensor child and one typed child.
struct Parent : nn::BasicModule<Parent> {
  Parent() : BasicModule("Parent") {
    proj = register_child("proj", std::make_shared<nn::Linear>(2, 2, false));
    inner = register_child("inner", std::make_shared<WritesOut>());
  }
  Tensor forward(const Tensor& x) override {
    Tensor side;
    return ops::add(inner(proj(x), side), side);
  }
  nn::ChildRef<> proj;
  nn::ChildRef<WritesOut> inner;
};

struct Zeros : Module {
  Zeros() : Module("Zeros") {}
  Tensor forward(const Tensor& x) override { return Tensor::zeros(x.shape()); }
};

}  // namespace

TEST_CASE("Every entry of a module call fires its hook once", "[nn][call_path]") {
  auto id = std::make_shared<Identity>();
  auto hook = std::make_shared<BumpHook>();
  id->set_hook(hook);
  const Tensor x = Tensor::ones({2});
  (*id)(x);                            // the typed (CRTP) operator()
  static_cast<Module&>(*id)(x);        // the type-erased entry
  auto parent = std::make_shared<Module>("Holder");
  parent->register_module("id", id);
  nn::ChildRef<> erased(*parent, "id");
  nn::ChildRef<Identity> typed(*parent, "id");
  erased(x);
  typed(x);
  CHECK(hook->pre == 4);
  CHECK(hook->post == 4);
  id->forward(x);  // forward itself bypasses the hook, as in torch
  CHECK(hook->pre == 4);
  // A module with no single-tensor forward says so through the type-erased entry.
  WritesOut w;
  CHECK_THROWS_AS(static_cast<Module&>(w)(x), ValueError);
}

TEST_CASE("Hooked calls keep references and move-only arguments", "[nn][call_path]") {
  WritesOut w;
  auto hook = std::make_shared<BumpHook>();
  hook->bump = 1;
  Tensor out;
  const Tensor x = Tensor::ones({2});
  // Without a hook: the caller's tensor is written.
  w(x, out);
  CHECK(out.to_vector<float>() == std::vector<float>{10.0f, 10.0f});
  // With a hook: x (a const lvalue) is copied and bumped; `out` is forward's by non-const
  // reference, so it stays the caller's object and forward's write reaches it.
  w.set_hook(hook);
  out = Tensor{};
  const Tensor y = w(x, out);
  CHECK(y.to_vector<float>() == std::vector<float>{2.0f, 2.0f});
  CHECK(x.to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  REQUIRE(out.defined());
  CHECK(out.to_vector<float>() == std::vector<float>{20.0f, 20.0f});

  // A move-only argument compiles and arrives, with and without a hook.
  TakesMoveOnly m;
  std::map<std::string, Tensor> named{{"a", Tensor::ones({1})}, {"past_key_values", Tensor::full({1}, 5.0)}};
  CHECK(m(std::make_unique<int>(3), named).to_vector<float>() == std::vector<float>{9.0f});
  auto skip = std::make_shared<BumpHook>();
  skip->bump = 100;
  skip->skip = nested::skip_keys{"past_key_values"};
  m.set_hook(skip);
  // Only "a" is bumped: the hook leaves the skipped key alone, and the caller's map is untouched.
  CHECK(m(std::make_unique<int>(3), named).to_vector<float>() == std::vector<float>{109.0f});
  CHECK(skip->seen == 1);
  CHECK(named.at("a").to_vector<float>() == std::vector<float>{1.0f});
}

TEST_CASE("TensorRefs and for_each_leaf leave out skipped keys at every level", "[nn][call_path]") {
  std::map<std::string, std::map<std::string, Tensor>> data{
      {"outer", {{"keep", Tensor::ones({1})}, {"skip", Tensor::ones({1})}}}, {"skip", {{"x", Tensor::ones({1})}}}};
  const nested::skip_keys skip{"skip"};
  std::size_t n = 0;
  nn::TensorRefs::of(data).for_each([&](Tensor&) { ++n; }, &skip);
  CHECK(n == 1);
  CHECK(nn::TensorRefs::of(data).size() == 3);
  n = 0;
  nested::for_each_leaf([&](const Tensor&) { ++n; }, data, nested::tensor_leaf{}, &skip);
  CHECK(n == 1);
}

TEST_CASE("Parents call the child now in the slot", "[nn][call_path]") {
  Parent p;
  p.get_submodule("proj").find_tensor_cell("weight")->get()->data.fill_(1.0);
  const Tensor x = Tensor::ones({1, 2});
  // proj: [2, 2]; inner returns it and writes 10x into side: 2 + 20.
  CHECK(p(x).to_vector<float>() == std::vector<float>{22.0f, 22.0f});
  p.replace_module("proj", std::make_shared<Zeros>());
  CHECK(p(x).to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  // A typed child replaced by a subclass is reached; by another class, refused by name.
  struct LoudWritesOut : WritesOut {};
  p.replace_module("inner", std::make_shared<LoudWritesOut>());
  CHECK(p(x).to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  p.replace_module("inner", std::make_shared<Zeros>());
  CHECK_THROWS_WITH(p(x), Catch::Contains("Parent.inner") && Catch::Contains("Zeros"));
  CHECK_THROWS_AS(nn::ChildRef<>(p, "nope"), KeyError);
}

TEST_CASE("The execution device comes from the hook, then the weights", "[nn][call_path]") {
  auto root = std::make_shared<Module>("Root");
  auto a = root->register_module("a", std::make_shared<nn::Linear>(2, 2));
  auto b = root->register_module("b", std::make_shared<nn::Linear>(2, 2));
  CHECK(root->execution_device() == Device::cpu());
  // Weights parked on meta: meta, until a hook says where the module computes.
  for (auto& [name, cell] : root->named_parameter_cells()) cell->data = Tensor::empty(cell->data.shape(), DType::f32, Device::meta());
  CHECK(root->execution_device() == Device::meta());
  auto hook = std::make_shared<BumpHook>();
  hook->device = Device::cpu();
  b->set_hook(hook);
  CHECK(b->execution_device() == Device::cpu());
  CHECK(root->execution_device() == Device::cpu());  // found among the submodules' hooks
  CHECK(a->execution_device() == Device::meta());
  CHECK(Module("Empty").execution_device() == Device::cpu());
}
