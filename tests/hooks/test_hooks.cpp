// hooks/: ModelHook chains, add / remove, AlignDevicesHook (offload, weights maps, tied weights,
// skip_keys, detach), the attach helpers and align_module_device.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accel/core/memory_stats.hpp"
#include "accel/hooks/hooks.hpp"
#include "accel/io/offload.hpp"
#include "accel/nn/containers.hpp"
#include "accel/nn/layers.hpp"
#include "accel/ops/ops.hpp"
#include "../temp_dir.hpp"

using namespace accel;
using nn::Module;

namespace {

/// Records the order of its calls in a shared log.
struct LogHook : hooks::ModelHook {
  std::vector<std::string>* log;
  std::string name;
  LogHook(std::vector<std::string>* l, std::string n) : log(l), name(std::move(n)) {}
  void init_hook(Module&) override { log->push_back(name + ".init"); }
  void pre_forward(Module&, const nn::TensorRefs&) override { log->push_back(name + ".pre"); }
  void post_forward(Module&, const nn::TensorRefs&) override { log->push_back(name + ".post"); }
  void detach_hook(Module&) override { log->push_back(name + ".detach"); }
};

/// A hook class for compile-time chains: only pre_forward, no virtual base needed.
struct AddOne {
  int* calls;
  void pre_forward(Module&, const nn::TensorRefs& args) {
    ++*calls;
    args.for_each([](Tensor& t) { t = ops::add(t, Tensor::ones(t.shape())); });
  }
};

std::shared_ptr<nn::Linear> linear(std::int64_t in, std::int64_t out, float w) {
  auto l = std::make_shared<nn::Linear>(in, out);
  l->find_tensor_cell("weight")->get()->data.fill_(w);
  l->find_tensor_cell("bias")->get()->data.fill_(0.5);
  return l;
}

/// embed -> block(a, b) -> head, head's weight tied to embed's.
struct TinyNet : nn::BasicModule<TinyNet> {
  TinyNet() : BasicModule("TinyNet") {
    embed = register_child("embed", linear(4, 4, 0.25f));
    auto block = std::make_shared<nn::Sequential>();
    block->push_back(linear(4, 4, 0.5f));
    block->push_back(linear(4, 4, -0.125f));
    block->set_class_name("Block");
    this->block = register_child<Module>("block", block);
    head = register_child("head", linear(4, 4, 0.0f));
    head->register_parameter("weight", embed->parameter_cell("weight"));
    register_buffer("scale", Tensor::full({4}, 2.0));
  }
  Tensor forward(const Tensor& x) override {
    return ops::mul(head(block(embed(x))), get_buffer("scale"));
  }
  nn::ChildRef<> embed, block, head;
};

Tensor input() { return Tensor::from_vector(std::vector<float>{1, -2, 3, 0.5f}, Shape{1, 4}); }

std::size_t meta_count(const Module& m) {
  std::size_t n = 0;
  for (const auto& [name, t] : m.state_dict()) n += t.is_meta() ? 1 : 0;
  return n;
}

/// Four 64 x 64 layers whose weights are also written to an offload folder, and their output.
struct OffloadedNet {
  accel_test::TempDir dir;
  nn::Sequential net;
  Tensor x = Tensor::ones({1, 64});
  std::vector<float> expect;
  OffloadedNet() {
    for (int i = 0; i < 4; ++i) net.push_back(linear(64, 64, 0.01f * static_cast<float>(i + 1)));
    expect = net(x).to_vector<float>();
    io::StateDict sd;
    for (const auto& [name, t] : net.state_dict()) sd.insert_or_assign(name, t);
    io::offload_state_dict(dir.str(), sd);
  }
  hooks::WeightsMap on_disk() const { return hooks::WeightsMap(std::make_shared<io::OffloadedWeightsLoader>(std::nullopt, dir.str())); }
};

}  // namespace

TEST_CASE("add_hook_to_module appends, replaces and removes as Accelerate does", "[hooks]") {
  std::vector<std::string> log;
  auto lin = linear(4, 4, 1.0f);
  hooks::add_hook_to_module(*lin, std::make_shared<LogHook>(&log, "a"));
  hooks::add_hook_to_module(*lin, std::make_shared<LogHook>(&log, "b"), /*append=*/true);
  // Appending initialises the new hook only: "a" stays attached as it was.
  hooks::add_hook_to_module(*lin, std::make_shared<LogHook>(&log, "b2"), /*append=*/true);
  (*lin)(input());
  CHECK(log == std::vector<std::string>{"a.init", "b.init", "b2.init", "a.pre", "b.pre", "b2.pre", "a.post", "b.post", "b2.post"});
  const auto* chain = dynamic_cast<hooks::SequentialHook<hooks::HookList>*>(lin->hook().get());
  REQUIRE(chain != nullptr);
  CHECK(chain->hooks().size() == 3);  // flat, not a chain in a chain
  CHECK(hooks::find_hook<LogHook>(*lin) == chain->hooks().front().get());
  log.clear();
  hooks::add_hook_to_module(*lin, std::make_shared<LogHook>(&log, "c"));  // replaces the chain
  CHECK(log == std::vector<std::string>{"a.detach", "b.detach", "b2.detach", "c.init"});
  log.clear();
  auto root = std::make_shared<Module>("Root");
  root->register_module("lin", lin);
  hooks::add_hook_to_module(*root, std::make_shared<LogHook>(&log, "r"));
  hooks::remove_hook_from_module(*root);
  CHECK(lin->hook() != nullptr);
  hooks::add_hook_to_module(*root, std::make_shared<LogHook>(&log, "r"));
  hooks::remove_hook_from_submodules(*root);
  CHECK(root->hook() == nullptr);
  CHECK(lin->hook() == nullptr);
  CHECK(log == std::vector<std::string>{"r.init", "r.detach", "r.init", "r.detach", "c.detach"});
  CHECK_THROWS_AS(hooks::add_hook_to_module(*root, std::shared_ptr<nn::ModuleHook>{}), ValueError);
}

TEST_CASE("Chaining a hook onto an offloading one leaves no stale read-ahead unit", "[hooks][align][stream]") {
  OffloadedNet o;
  auto& [dir, net, x, expect] = o;
  auto stream = std::make_shared<hooks::WeightStream>(2);
  hooks::attach_align_device_hook<policy::prefetch<2>>(net, {.execution_device = Device::cpu(), .offload = true,
                                                             .weights_map = o.on_disk(), .stream = stream});
  REQUIRE(stream->live_units() == 4);
  CHECK(net(x).to_vector<float>() == expect);

  // A hook appended to an offloading layer: the layer's unit stays the one the stream reads.
  std::vector<std::string> log;
  hooks::add_hook_to_module(net.get_submodule("1"), std::make_shared<LogHook>(&log, "extra"), /*append=*/true);
  CHECK(stream->units() == 4);
  CHECK(hooks::has_offloaded_params(net.get_submodule("1")));
  REQUIRE(hooks::find_hook<hooks::AlignDevicesHookBase>(net.get_submodule("1")) != nullptr);
  CHECK(net(x).to_vector<float>() == expect);
  CHECK(log == std::vector<std::string>{"extra.init", "extra.pre", "extra.post"});

  // A hook put in front (a split model's stage hook): initialised alone, first to see the call,
  // and the offloading hook's unit stays the one the stream reads.
  log.clear();
  hooks::prepend_hook_to_module(net.get_submodule("1"), std::make_shared<LogHook>(&log, "front"));
  CHECK(stream->units() == 4);
  CHECK(stream->live_units() == 4);
  const auto* chain = dynamic_cast<hooks::SequentialHook<hooks::HookList>*>(net.get_submodule("1").hook().get());
  REQUIRE(chain != nullptr);
  CHECK(chain->hooks().size() == 3);  // front, the offloading hook, extra: one flat chain
  CHECK(net(x).to_vector<float>() == expect);
  CHECK(log == std::vector<std::string>{"front.init", "front.pre", "extra.pre", "front.post", "extra.post"});
  CHECK_THROWS_AS(hooks::prepend_hook_to_module(net, std::shared_ptr<nn::ModuleHook>{}), ValueError);

  // Detached and attached again (Accelerate's remove then add): the old unit is retired and the
  // new one read in its place.
  auto again = hooks::find_hook<hooks::AlignDevicesHookBase>(net.get_submodule("2"));
  REQUIRE(again != nullptr);
  auto keep = std::static_pointer_cast<nn::ModuleHook>(net.get_submodule("2").hook());
  hooks::remove_hook_from_module(net.get_submodule("2"));
  CHECK(stream->live_units() == 3);
  hooks::add_hook_to_module(net.get_submodule("2"), keep);
  CHECK(stream->units() == 5);
  CHECK(stream->live_units() == 4);
  CHECK(net(x).to_vector<float>() == expect);
  CHECK(stream->buffers() <= 3);
  CHECK_THROWS_WITH(stream->acquire(2), Catch::Contains("retired"));
  hooks::remove_hook_from_submodules(net);
  CHECK(stream->live_units() == 0);
  CHECK(net(x).to_vector<float>() == expect);
}

TEST_CASE("The offload policy picks the hooks' instantiation and how they read", "[hooks][align][stream][policy]") {
  OffloadedNet o;
  auto& [dir, net, x, expect] = o;
  const auto on_disk = [&] { return o.on_disk(); };

  // sync_offload: each call reads its weights in the caller's thread, into one buffer.
  hooks::attach_align_device_hook<policy::sync_offload>(net, {.execution_device = Device::cpu(), .offload = true, .weights_map = on_disk()});
  REQUIRE(hooks::find_hook<hooks::AlignDevicesHook<policy::sync_offload>>(net.get_submodule("0")) != nullptr);
  CHECK(hooks::find_hook<hooks::AlignDevicesHook<policy::prefetch<2>>>(net.get_submodule("0")) == nullptr);
  auto stream = hooks::offload_stream(net);
  REQUIRE(stream);
  CHECK(stream->depth() == 0);
  for (int call = 0; call < 2; ++call) CHECK(net(x).to_vector<float>() == expect);
  CHECK_FALSE(stream->reading_ahead());
  CHECK(stream->buffers() == 1);
  hooks::remove_hook_from_submodules(net);

  // prefetch<2>: a worker reads the next two units while one computes, in a ring of three.
  hooks::attach_align_device_hook<policy::prefetch<2>>(net, {.execution_device = Device::cpu(), .offload = true, .weights_map = on_disk()});
  const auto* hook = hooks::find_hook<hooks::AlignDevicesHook<policy::prefetch<2>>>(net.get_submodule("3"));
  REQUIRE(hook != nullptr);
  CHECK(hook->prefetch_depth() == 2);
  stream = hooks::offload_stream(net);
  CHECK(stream->depth() == 2);
  for (int call = 0; call < 2; ++call) CHECK(net(x).to_vector<float>() == expect);
  CHECK(stream->reading_ahead());
  CHECK(stream->buffers() <= 3);
  hooks::remove_hook_from_submodules(net);

  // A hook cannot disagree with its policy: no_offload moves nothing, a stream has one depth.
  CHECK_THROWS_WITH(hooks::AlignDevicesHook<policy::no_offload>({.offload = true}), Catch::Contains("no_offload"));
  CHECK_THROWS_WITH(hooks::AlignDevicesHook<policy::prefetch<1>>({.offload = true, .stream = std::make_shared<hooks::WeightStream>(2)}),
                    Catch::Contains("prefetch<1>"));
  CHECK_NOTHROW(hooks::AlignDevicesHook<policy::no_offload>({.execution_device = Device::cpu()}));
}

TEST_CASE("A compile-time chain calls its hooks in order; an empty chain attaches nothing", "[hooks]") {
  auto lin = linear(4, 4, 1.0f);
  const Tensor plain = (*lin)(input());
  hooks::add_hook_to_module(*lin, hooks::SequentialHook<>{});
  CHECK(lin->hook() == nullptr);
  int calls = 0;
  hooks::SequentialHook chain(AddOne{&calls}, AddOne{&calls});  // deduces SequentialHook<AddOne, AddOne>
  STATIC_REQUIRE(std::is_same_v<decltype(chain), hooks::SequentialHook<AddOne, AddOne>>);
  hooks::add_hook_to_module(*lin, chain);
  const Tensor bumped = (*lin)(input());
  CHECK(calls == 2);
  // Every input element grew by 2, every weight is 1: each output grew by 4 * 2.
  CHECK(bumped.to_vector<float>()[0] == Approx(plain.to_vector<float>()[0] + 8.0f));
}

TEST_CASE("AlignDevicesHook with offload parks weights between calls and restores them on detach", "[hooks][align]") {
  TinyNet net;
  const Tensor expect = net(input());
  const Tensor embed_weight = net.get_parameter("embed.weight");
  auto hook = std::make_shared<hooks::AlignDevicesHook<>>(
      hooks::AlignDevicesOptions{.execution_device = Device::cpu(), .offload = true, .place_submodules = true});
  hooks::add_hook_to_module(net.get_submodule("block"), hook);
  CHECK(hooks::has_offloaded_params(net.get_submodule("block")));
  CHECK_FALSE(hooks::has_offloaded_params(net));
  CHECK(meta_count(net) == 4);  // the block's two weights and two biases
  CHECK(net(input()).to_vector<float>() == expect.to_vector<float>());
  CHECK(meta_count(net) == 4);
  {
    auto scope = hooks::align_module_device(net);
    CHECK(meta_count(net) == 0);
  }
  CHECK(meta_count(net) == 4);
  hooks::remove_hook_from_module(net.get_submodule("block"));
  CHECK(meta_count(net) == 0);
  CHECK(net(input()).to_vector<float>() == expect.to_vector<float>());
  CHECK(net.get_parameter("embed.weight").data_ptr() == embed_weight.data_ptr());
}

TEST_CASE("Offloading to disk frees the module's copies; detach reads them back", "[hooks][align]") {
  accel_test::TempDir dir;
  nn::Sequential net;
  for (int i = 0; i < 3; ++i) net.push_back(linear(256, 256, 0.01f * static_cast<float>(i + 1)));
  const Tensor x = Tensor::ones({2, 256});
  const std::vector<float> expect = net(x).to_vector<float>();
  io::StateDict sd;
  for (const auto& [name, t] : net.state_dict()) sd.insert_or_assign(name, t);
  io::offload_state_dict(dir.str(), sd);
  sd = {};
  const std::size_t held = memory_stats(Device::cpu()).allocated_bytes;
  hooks::attach_align_device_hook(net, {.execution_device = Device::cpu(), .offload = true,
                                        .weights_map = hooks::WeightsMap(std::make_shared<io::OffloadedWeightsLoader>(std::nullopt, dir.str()))});
  // The three layers' weights and biases (about 0.8 MB) are no longer held.
  CHECK(held - memory_stats(Device::cpu()).allocated_bytes >= 3 * (256 * 256 + 256) * 4);
  CHECK(net(x).to_vector<float>() == expect);
  hooks::remove_hook_from_submodules(net);
  CHECK(meta_count(net) == 0);
  CHECK(net.get_parameter("1.weight").is_cpu());
  CHECK(net.get_parameter("1.weight").storage().kind() != MemoryKind::mapped);  // a copy, not a view of the file
  CHECK(net(x).to_vector<float>() == expect);
}

TEST_CASE("Offloading one end of a tie leaves the other in place", "[hooks][align][tied]") {
  TinyNet net;
  const Tensor expect = net(input());
  auto tied = std::make_shared<nn::TiedParamsMap>();
  hooks::add_hook_to_module(net.get_submodule("head"),
                            std::make_shared<hooks::AlignDevicesHook<>>(hooks::AlignDevicesOptions{
                                .execution_device = Device::cpu(), .offload = true, .tied_params_map = tied}));
  CHECK(net.get_parameter("head.weight").is_meta());
  CHECK_FALSE(net.get_parameter("embed.weight").is_meta());
  CHECK(net(input()).to_vector<float>() == expect.to_vector<float>());
  CHECK(tied->empty());  // the copies a hook makes for a call are gone after it
  // Both ends offloaded and materialised at once share one copy through the map.
  hooks::add_hook_to_module(net.get_submodule("embed"),
                            std::make_shared<hooks::AlignDevicesHook<>>(hooks::AlignDevicesOptions{
                                .execution_device = Device::cpu(), .offload = true, .tied_params_map = tied}));
  CHECK(net.get_parameter("embed.weight").is_meta());
  {
    auto scope = hooks::align_module_device(net);
    CHECK(net.get_parameter("embed.weight").data_ptr() == net.get_parameter("head.weight").data_ptr());
  }
  CHECK(net(input()).to_vector<float>() == expect.to_vector<float>());
  hooks::remove_hook_from_submodules(net);
  CHECK(net.find_tensor_cell("embed.weight")->get() == net.find_tensor_cell("head.weight")->get());  // tied again
}

TEST_CASE("Weights maps: a state dict, an offload folder, prefixes and bad entries", "[hooks][align]") {
  TinyNet net;
  const Tensor expect = net(input());
  accel_test::TempDir dir;
  io::StateDict sd;
  for (const auto& [name, t] : net.state_dict()) sd.insert_or_assign(name, t);
  io::offload_state_dict(dir.str(), sd);
  auto loader = std::make_shared<io::OffloadedWeightsLoader>(std::nullopt, dir.str());
  const hooks::WeightsMap all(loader);
  CHECK(all.prefixed("block.").prefixed("0.").contains("weight"));
  CHECK_THROWS_WITH(all.prefixed("block.").at("nope"), Catch::Contains("block.nope"));

  // Every weight of the net parked, read back from disk for each call.
  for (const auto& [name, cell] : net.state_dict_cells()) cell->data = Tensor::empty(cell->data.shape(), cell->data.dtype(), Device::meta());
  hooks::attach_align_device_hook(net, {.execution_device = Device::cpu(), .offload = true, .weights_map = all,
                                        .offload_buffers = true});
  CHECK(net.hook() != nullptr);  // the root holds the `scale` buffer
  CHECK(net.get_submodule("block").hook() == nullptr);
  CHECK(net.get_submodule("block.1").hook() != nullptr);
  CHECK(net(input()).to_vector<float>() == expect.to_vector<float>());
  CHECK(meta_count(net) == net.state_dict().size());
  hooks::remove_hook_from_submodules(net);

  // A map whose weight has another shape than the module's: a ShapeError naming it.
  io::StateDict wrong;
  wrong.insert_or_assign("weight", Tensor::zeros({2, 2}));
  wrong.insert_or_assign("bias", Tensor::zeros({4}));
  auto lin = linear(4, 4, 1.0f);
  hooks::add_hook_to_module(*lin, std::make_shared<hooks::AlignDevicesHook<>>(hooks::AlignDevicesOptions{
                                      .execution_device = Device::cpu(), .offload = true,
                                      .weights_map = hooks::WeightsMap(wrong).prefixed("")}));
  CHECK_THROWS_WITH((*lin)(input()), Catch::Contains("'weight'") && Catch::Contains("[2, 2]"));
}

TEST_CASE("A preload class loads its whole subtree in one hook", "[hooks][align]") {
  TinyNet net;
  const Tensor expect = net(input());
  hooks::attach_align_device_hook(net, {.execution_device = Device::cpu(), .offload = true,
                                        .preload_module_classes = {"Block"}});
  auto* block_hook = dynamic_cast<hooks::AlignDevicesHookBase*>(net.get_submodule("block").hook().get());
  REQUIRE(block_hook != nullptr);
  CHECK(block_hook->options().place_submodules);
  CHECK(net.get_submodule("block.0").hook() == nullptr);
  CHECK(net(input()).to_vector<float>() == expect.to_vector<float>());
}

TEST_CASE("Hooks on blocks: per-module devices and offload flags", "[hooks][align]") {
  TinyNet net;
  const Tensor expect = net(input());
  hooks::attach_align_device_hook_on_blocks(
      net, hooks::BlockAttachOptions{.execution_device = {{"embed", Device::cpu()}, {"block", Device::cpu()}, {"head", Device::cpu()}},
                                     .offload = {{"embed", false}, {"block", true}, {"head", false}}});
  CHECK(net.hook() != nullptr);  // the root aligns the inputs
  CHECK(hooks::has_offloaded_params(net.get_submodule("block.0")));
  CHECK_FALSE(hooks::has_offloaded_params(net.get_submodule("embed")));
  CHECK(net.get_parameter("block.0.weight").is_meta());
  CHECK(net(input()).to_vector<float>() == expect.to_vector<float>());
  CHECK_THROWS_AS(hooks::attach_align_device_hook_on_blocks(
                      net, hooks::BlockAttachOptions{.execution_device = {{"embed", Device::cpu()}}}),
                  ValueError);
}

TEST_CASE("Arguments move to the execution device except skipped keys", "[hooks][align]") {
  struct Recorder : nn::BasicModule<Recorder> {
    Recorder() : BasicModule("Recorder") {}
    std::map<std::string, Device> seen;
    Tensor forward(const std::map<std::string, Tensor>& in) {
      for (const auto& [k, t] : in) seen.insert_or_assign(k, t.device());
      return Tensor::zeros({1});
    }
  };
  Recorder r;
  hooks::add_hook_to_module(r, std::make_shared<hooks::AlignDevicesHook<>>(hooks::AlignDevicesOptions{
                                   .execution_device = Device::meta(), .skip_keys = {"past_key_values"}}));
  std::map<std::string, Tensor> in{{"hidden", Tensor::ones({2})}, {"past_key_values", Tensor::ones({2})}};
  r(in);
  CHECK(r.seen.at("hidden") == Device::meta());
  CHECK(r.seen.at("past_key_values") == Device::cpu());
  CHECK(in.at("hidden").device() == Device::cpu());  // the caller's map is not moved
  CHECK(r.execution_device() == Device::meta());
}
