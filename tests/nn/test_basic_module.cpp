// BasicModule<Derived, P>: policy bundles decide the compute dtype and the fp32 outputs; calls
// take nested argument packs and hooks see every tensor of them; libtorch's verbs.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "accel/nn/basic_module.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/layers.hpp"
#include "accel/nn/module.hpp"

using namespace accel;
using nn::Module;

namespace {

using BF16 = policies<policy::bf16>;

/// The same code under any bundle: a linear layer inside a block.
template <class P>
struct Block : nn::BasicModule<Block<P>, P> {
  std::shared_ptr<nn::BasicLinear<P>> proj;
  std::optional<DType> inner_dtype;
  Block() : nn::BasicModule<Block<P>, P>("Block") {
    proj = this->register_module("proj", std::make_shared<nn::BasicLinear<P>>(3, 2, false, DType::f32));
    const std::vector<float> w{0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f};
    proj->find_tensor_cell("weight")->get()->data = Tensor::from_vector(w, Shape{2, 3});
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*proj)(x);
    inner_dtype = y.dtype();
    return y;
  }
};

/// A forward over a nested pack: a struct, an optional, a vector and a pointer.
struct Inputs {
  Tensor hidden;
  std::optional<Tensor> mask;
  std::vector<Tensor> extra;
};
struct PackModule : nn::BasicModule<PackModule> {
  PackModule() : BasicModule("PackModule") {}
  std::tuple<Tensor, Tensor> forward(const Inputs& in, const Tensor& scale, int* calls) {
    ++*calls;
    Tensor s = ops::mul(in.hidden, scale);
    for (const auto& e : in.extra) s = ops::add(s, e);
    return {s, in.mask.value_or(Tensor::zeros({1}))};
  }
};

struct CountingHook : nn::ModuleHook {
  int inits = 0, detaches = 0;
  std::size_t seen_args = 0, seen_outputs = 0;
  void init_hook(Module&) override { ++inits; }
  void detach_hook(Module&) override { ++detaches; }
  void pre_forward(Module&, const nn::TensorRefs& args) override {
    seen_args = args.size();
    args.for_each([](Tensor& t) { t = ops::mul(t, Tensor::full(t.shape(), 2.0, t.dtype())); });
  }
  void post_forward(Module&, const nn::TensorRefs& outputs) override { seen_outputs = outputs.size(); }
};

}  // namespace

TEST_CASE("Two bundles compute the same code in different dtypes", "[nn][policy]") {
  const Tensor x = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, Shape{1, 3});
  Block<default_policies> plain;
  Block<BF16> mixed;
  const Tensor y32 = plain(x);
  const Tensor y16 = mixed(x);
  CHECK(plain.inner_dtype == DType::f32);
  CHECK(y32.dtype() == DType::f32);
  // bf16: the inner linear computes in bf16, the outermost call converts back to fp32.
  CHECK(mixed.inner_dtype == DType::bf16);
  CHECK(y16.dtype() == DType::f32);
  const Tensor expect = ops::linear(x.to(DType::bf16), mixed.proj->weight().to(DType::bf16)).to(DType::f32);
  CHECK(y16.to_vector<float>() == expect.to_vector<float>());
  CHECK(y32.to_vector<float>() != y16.to_vector<float>());
  // Called through a plain Module reference (as Sequential does), the bundle still applies.
  Module& as_module = mixed;
  CHECK(as_module(x).dtype() == DType::f32);
  CHECK(mixed.inner_dtype == DType::bf16);
  // A module kept in float32 (keep_in_fp32_modules) computes outside the bundle's scope: its
  // float32 weight multiplies in float32, widening lower-precision activations.
  mixed.proj->set_keeps_fp32(true);
  CHECK(mixed(x).to_vector<float>() == y32.to_vector<float>());
  CHECK(mixed.inner_dtype == DType::f32);
  CHECK((*mixed.proj)(x.to(DType::bf16)).dtype() == DType::f32);
  mixed.proj->set_keeps_fp32(false);
  // Layers of a bundle hold weights in its storage dtype unless told otherwise.
  CHECK(nn::BasicLinear<BF16>(4, 4).weight().dtype() == DType::bf16);
  CHECK(nn::Linear(4, 4).weight().dtype() == DType::f32);
  STATIC_REQUIRE(std::is_same_v<nn::policies_of_t<Block<BF16>>, BF16>);
  STATIC_REQUIRE(std::is_void_v<nn::policies_of_t<nn::ModuleList>>);
}

TEST_CASE("Calls take nested packs and hooks see every tensor of them", "[nn][module][hook]") {
  PackModule m;
  int calls = 0;
  Inputs in{Tensor::ones({2}), Tensor::ones({1}), {Tensor::ones({2}), Tensor::ones({2})}};
  auto [y, mask] = m(in, Tensor::full({2}, 3.0), &calls);
  CHECK(calls == 1);
  CHECK(y.to_vector<float>() == std::vector<float>{5.0f, 5.0f});

  auto hook = std::make_shared<CountingHook>();
  m.set_hook(hook);
  CHECK(hook->inits == 1);
  auto [y2, mask2] = m(in, Tensor::full({2}, 3.0), &calls);
  CHECK(calls == 2);
  CHECK(hook->seen_args == 5);  // hidden, mask, two extras, scale: the pointer is not a tensor
  CHECK(hook->seen_outputs == 2);
  // Every argument tensor was doubled by the hook: (2 * 6) + 2 + 2.
  CHECK(y2.to_vector<float>() == std::vector<float>{16.0f, 16.0f});
  // The caller's arguments are untouched: the hook works on a copy of the pack.
  CHECK(in.hidden.to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  m.set_hook(nullptr);
  CHECK(hook->detaches == 1);
}

TEST_CASE("libtorch's verbs: children, modules, buffers, find_*, replace_module, as<T>", "[nn][module]") {
  auto root = std::make_shared<Module>("Root");
  auto lin = root->register_module("lin", std::make_shared<nn::Linear>(2, 3));
  auto list = root->register_module("list", std::make_shared<nn::ModuleList>());
  list->push_back(std::make_shared<nn::RMSNorm>(3));
  list->push_back(lin);  // registered twice: reported once
  root->register_buffer("steps", Tensor::zeros({1}, DType::i64));
  CHECK(root->children().size() == 2);
  CHECK(root->modules().size() == 4);
  CHECK(root->modules(/*include_self=*/false).size() == 3);
  CHECK(root->buffers().size() == 1);
  CHECK(root->parameters().size() == 3);
  CHECK(root->parameters(/*recurse=*/false).empty());

  CHECK(root->find_submodule("list.0") != nullptr);
  CHECK(root->find_submodule("list.7") == nullptr);
  CHECK(root->find_submodule("nope.0") == nullptr);
  CHECK(root->find_parameter("lin.weight") != nullptr);
  CHECK(root->find_parameter("lin.nope") == nullptr);
  CHECK(root->find_buffer("steps") != nullptr);
  CHECK(root->find_buffer("lin.weight") == nullptr);
  CHECK(root->find_tensor_cell("list.0.weight") != nullptr);
  CHECK_FALSE(root->has_tensor("list.0.bias"));
  CHECK_THROWS_AS(root->get_parameter("list.0.bias"), KeyError);

  CHECK(root->get_submodule("lin").as<nn::Linear>() == lin.get());
  CHECK(root->get_submodule("lin").as<nn::RMSNorm>() == nullptr);

  // replace_module keeps the child's place in the order; an unknown name is a KeyError.
  root->replace_module("lin", std::make_shared<nn::Linear>(2, 5));
  CHECK(root->named_children().front().first == "lin");
  CHECK(root->get_parameter("lin.weight").shape() == Shape{5, 2});
  CHECK_THROWS_AS(root->replace_module("missing", std::make_shared<nn::Linear>(1, 1)), KeyError);
  // A name keeps its kind: a parameter name cannot become a child.
  CHECK_THROWS_AS(lin->register_module("weight", std::make_shared<Module>()), KeyError);

  // A layer reads its weight through the slot, so a re-tie is seen without a lookup.
  auto other = std::make_shared<nn::Linear>(2, 3, false);
  other->register_parameter("weight", lin->parameter_cell("weight"));
  CHECK(other->weight().is_same(lin->weight()));
  lin->parameter_cell("weight")->data = Tensor::ones({3, 2});
  CHECK(other->weight().to_vector<float>() == std::vector<float>(6, 1.0f));
  const Tensor y = (*other)(Tensor::ones({1, 2}));
  CHECK(y.to_vector<float>() == std::vector<float>{2.0f, 2.0f, 2.0f});

  // to(dtype) and to(device, dtype, non_blocking) convert floating tensors only.
  root->to(DType::bf16);
  CHECK(root->get_parameter("list.0.weight").dtype() == DType::bf16);
  CHECK(root->get_buffer("steps").dtype() == DType::i64);
  root->to(Device::cpu(), DType::f32, /*non_blocking=*/true);
  CHECK(root->get_parameter("list.0.weight").dtype() == DType::f32);
}
