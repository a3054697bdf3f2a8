// PartialState under each policy, the launcher's variables, split_between_processes, the object
// collectives, save and extract_model_from_parallel.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../temp_dir.hpp"
#include "accel/io/safetensors.hpp"
#include "accel/policy/policies.hpp"
#include "accel/utils/environment.hpp"
#include "dist_fixture.hpp"

using namespace accel_dist_test;
namespace dist = accel::dist;

namespace {
/// Whether an MPI launcher started this binary (what the state must agree with).
std::optional<int> launched_size() {
  const auto v = accel::get_env("OMPI_COMM_WORLD_SIZE");
  if (!v) return std::nullopt;
  return std::stoi(*v);
}
}  // namespace

TEST_CASE("PartialState<multi_cpu<mpi>> is the run mpirun started, or a world of one", "[dist][mpi]") {
  const auto& s = state();
  if (const auto size = launched_size()) {
    CHECK(s.num_processes() == *size);
    CHECK(s.process_index() == std::stoi(*accel::get_env("OMPI_COMM_WORLD_RANK")));
    CHECK(s.local_process_index() == std::stoi(*accel::get_env("OMPI_COMM_WORLD_LOCAL_RANK")));
    CHECK(s.local_world_size() == std::stoi(*accel::get_env("OMPI_COMM_WORLD_LOCAL_SIZE")));
    CHECK(s.distributed_type() == accel::DistributedType::multi_cpu);
    CHECK(s.backend() == std::optional<std::string_view>("mpi"));
    CHECK(s.use_distributed() == (*size > 1));
  } else {
    CHECK(s.num_processes() == 1);
    CHECK(s.process_index() == 0);
    CHECK(s.distributed_type() == accel::DistributedType::no);
    CHECK_FALSE(s.backend().has_value());
    CHECK_FALSE(s.use_distributed());
  }
  CHECK(s.is_main_process() == (s.process_index() == 0));
  CHECK(s.is_local_main_process() == (s.local_process_index() == 0));
  CHECK(s.is_last_process() == (s.process_index() == s.num_processes() - 1));
  CHECK(s.device() == Device::cpu());
  CHECK(s.timeout() == std::chrono::seconds(120));
  // A second state shares the first one's: its kwargs are ignored.
  const CpuState again(accel::InitProcessGroupKwargs{.timeout = std::chrono::seconds(5)});
  CHECK(again.timeout() == std::chrono::seconds(120));
  CHECK(again.process_index() == s.process_index());
  s.wait_for_everyone();
}

TEST_CASE("several CPU processes of a node share its cores unless OMP_NUM_THREADS says otherwise", "[dist]") {
  const int before = accel::num_threads();
  const auto omp = accel::get_env("OMP_NUM_THREADS");
  if (omp && world() > 1) CHECK(before == std::stoi(*omp));  // the launcher's setting is kept
  ::unsetenv("OMP_NUM_THREADS");
  const int cores = accel::physical_cores();
  CHECK(cores >= 1);
  CHECK(cores <= static_cast<int>(std::max(std::thread::hardware_concurrency(), 1u)));
  for (const int local : {1, 2, 3, 64}) {
    CAPTURE(local, cores, accel::affinity_cpus());
    accel::dist::detail::share_cpu_threads(local);
    const int want = std::min(accel::affinity_cpus(), std::max(cores / local, 1));
#if defined(_OPENMP)
    CHECK(accel::num_threads() == want);
#else
    CHECK(accel::num_threads() == 1);
#endif
  }
  ::setenv("MKL_NUM_THREADS", "7", 1);
  accel::set_num_threads(5);
  accel::dist::detail::share_cpu_threads(2);
#if defined(_OPENMP)
  CHECK(accel::num_threads() == 5);
#endif
  ::unsetenv("MKL_NUM_THREADS");
  if (omp) ::setenv("OMP_NUM_THREADS", omp->c_str(), 1);
  accel::set_num_threads(before);
}

TEST_CASE("a policy bundle names the state's implementation", "[dist][mpi]") {
  using P = accel::policies<accel::policy::multi_cpu<>>;
  const dist::PartialState<P::distributed> s;
  CHECK(s.num_processes() == world());
  STATIC_REQUIRE(std::is_same_v<dist::PartialState<>::distributed, accel::policy::no_dist>);
}

TEST_CASE("multi_gpu<nccl> shares the MPI group and sends CPU tensors over it", "[dist][mpi]") {
  const dist::PartialState<accel::policy::multi_gpu<>> gpu;
  CHECK(gpu.num_processes() == world());
  CHECK(gpu.process_index() == rank());
  if (gpu.communicates()) CHECK(gpu.distributed_type() == accel::DistributedType::multi_gpu);
  const Tensor all = dist::gather(gpu, sample(DType::i64, rank(), Shape{2}));
  CHECK(all.shape() == Shape{2 * world()});
  CHECK(values(dist::reduce(gpu, Tensor::ones(Shape{3}), "sum")) == std::vector<double>(3, world()));
}

TEST_CASE("the launch environment follows Accelerate's variables and refuses contradictions", "[dist]") {
  auto none = accel::clear_environment();
  CHECK(dist::read_launch_environment() == dist::LaunchEnvironment{});
  {
    auto env = accel::patch_environment({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                                         {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
    const auto e = dist::read_launch_environment();
    CHECK(e.rank == 2);
    CHECK(e.world_size == 4);
    CHECK(e.local_rank == 0);
    CHECK(e.local_world_size == 2);
    CHECK(e.launcher == dist::Launcher::torchrun);
    CHECK(e.master_addr == std::optional<std::string>("node7"));
    CHECK(e.master_port == 1234);
  }
  {
    auto env = accel::patch_environment({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}});
    const auto e = dist::read_launch_environment();
    CHECK(e.rank == 1);
    CHECK(e.world_size == 3);
    CHECK(e.launcher == dist::Launcher::mpi);
    CHECK(e.master_port == 29500);
    CHECK(accel::utils::get_cpu_distributed_information() == accel::utils::CPUInformation{1, 3, 1, 3});
  }
  {
    auto env = accel::patch_environment({{"RANK", "3"}, {"WORLD_SIZE", "2"}});
    CHECK_THROWS_WITH(dist::read_launch_environment(), Catch::Contains("rank 3 is not below the world size 2"));
  }
  {
    auto env = accel::patch_environment({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}});
    CHECK(dist::read_launch_environment().local_rank == 1);  // no local size given: no check
  }
  {
    auto env = accel::patch_environment({{"WORLD_SIZE", "two"}});
    CHECK_THROWS_AS(dist::read_launch_environment(), accel::ValueError);
  }
}

TEST_CASE("PartialState kwargs: the backend must be the policy's, the timeout positive", "[dist]") {
  using accel::InitProcessGroupKwargs;
  dist::detail::SharedProcessState fresh;
  auto init = [&](const InitProcessGroupKwargs& k) { dist::detail::init_shared_state<accel::policy::no_dist>(fresh, k); };
  CHECK_THROWS_WITH(
      (dist::detail::init_shared_state<accel::policy::multi_cpu<>>(fresh, InitProcessGroupKwargs{.backend = "gloo"})),
      Catch::Contains("Your assigned backend gloo is not available, please use mpi"));
  CHECK_THROWS_AS(init(InitProcessGroupKwargs{.backend = "mpi"}), accel::ValueError);
  CHECK_THROWS_WITH(init(InitProcessGroupKwargs{.timeout = std::chrono::seconds(0)}),
                    Catch::Contains("timeout must be positive"));
  init(InitProcessGroupKwargs{});  // "nccl", the dataclass's default, counts as unset
  CHECK(fresh.timeout == std::chrono::seconds(1800));
  CHECK(fresh.type == accel::DistributedType::no);
}

TEST_CASE("multi_cpu<mpi> refuses several processes that no MPI launcher started", "[dist]") {
  // Only meaningful before MPI is joined: the plain one-process run.
#if defined(ACCEL_WITH_MPI)
  if (dist::detail::MpiGroup::initialized()) return;
#endif
  auto none = accel::clear_environment();
  auto env = accel::patch_environment({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  dist::detail::SharedProcessState fresh;
  CHECK_THROWS_AS(dist::detail::init_shared_state<accel::policy::multi_cpu<>>(fresh, accel::InitProcessGroupKwargs{}),
                  accel::DistributedError);
  CHECK_THROWS_WITH(dist::detail::init_shared_state<accel::policy::multi_cpu<>>(fresh, accel::InitProcessGroupKwargs{}),
                    Catch::Contains("launch with mpirun -np 2"));
}

TEST_CASE("split_between_processes gives each process its share, padded on request", "[dist][mpi]") {
  const int n = world(), r = rank();
  const std::vector<std::string> five{"A", "B", "C", "D", "E"};
  // The shares Accelerate's PartialState gives for 1, 2 and 3 processes.
  const std::vector<std::vector<std::vector<std::string>>> expect{
      {{"A", "B", "C", "D", "E"}}, {{"A", "B", "C"}, {"D", "E"}}, {{"A", "B"}, {"C", "D"}, {"E"}}};
  const auto& mine = expect[static_cast<std::size_t>(n - 1)][static_cast<std::size_t>(r)];
  CHECK(state().split_between_processes(five) == mine);
  auto padded = mine;
  const std::size_t longest = expect[static_cast<std::size_t>(n - 1)][0].size();
  while (padded.size() < longest) padded.push_back("E");
  CHECK(state().split_between_processes(five, true) == padded);

  // A tensor splits along dim 0, a view when unpadded; padding repeats the input's last row.
  const Tensor rows = Tensor::from_vector<std::int32_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{5, 2});
  const Tensor share = state().split_between_processes(rows);
  const std::int64_t start = r == 0 ? 0 : (n == 2 ? 3 : 2 * r);
  CHECK(share.shape() == Shape{static_cast<std::int64_t>(mine.size()), 2});
  CHECK(values(share) == values(rows.narrow(0, start, share.shape()[0])));
  const Tensor padded_rows = state().split_between_processes(rows, true);
  CHECK(padded_rows.shape() == Shape{static_cast<std::int64_t>(longest), 2});
  if (mine.size() < longest) CHECK(values(padded_rows.narrow(0, longest - 1, 1)) == std::vector<double>{8, 9});

  // A map splits every value alike.
  const std::map<std::string, std::vector<int>> m{{"x", {1, 2, 3, 4, 5}}, {"y", {6, 7, 8, 9, 10}}};
  const auto ms = state().split_between_processes(m);
  CHECK(ms.at("x").size() == mine.size());
  CHECK(ms.at("y").front() == 6 + static_cast<int>(start));
  const std::map<std::string, std::vector<int>> uneven{{"x", {1, 2}}, {"y", {1}}};
  if (n > 1) CHECK_THROWS_WITH(state().split_between_processes(uneven), Catch::Contains("same length"));

  // Fewer inputs than processes: the last processes get the last input.
  const std::vector<int> two{10, 20};
  const auto few = state().split_between_processes(two);
  if (n == 3) CHECK(few == (r == 0 ? std::vector<int>{10} : r == 1 ? std::vector<int>{20} : std::vector<int>{20}));
}

TEST_CASE("gather_object and broadcast_object_list carry C++ objects between processes", "[dist][mpi]") {
  const int n = world(), r = rank();
  struct Record {
    std::string name;
    std::vector<double> scores;
    std::optional<Tensor> extra;
  };
  const std::vector<Record> mine{{"p" + std::to_string(r), {r * 1.0, r + 0.5}, sample(DType::bf16, r, Shape{2})}};
  const std::vector<Record> all = dist::gather_object(state(), mine);
  REQUIRE(all.size() == static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) {
    CHECK(all[p].name == "p" + std::to_string(p));
    CHECK(all[p].scores == std::vector<double>{p * 1.0, p + 0.5});
    REQUIRE(all[p].extra.has_value());
    CHECK(all[p].extra->dtype() == DType::bf16);
    CHECK(values(*all[p].extra) == values(sample(DType::bf16, p, Shape{2})));
  }
  // A non-sequence: one object per process.
  const std::vector<std::map<std::string, int>> maps = dist::gather_object(state(), std::map<std::string, int>{{"r", r}});
  REQUIRE(maps.size() == static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) CHECK(maps[p].at("r") == p);

  // broadcast_object_list: every process ends with the sender's list, resized to its length.
  const int from = n - 1;
  std::vector<std::string> objects(static_cast<std::size_t>(r + 1), "rank" + std::to_string(r));
  auto& same = dist::broadcast_object_list(state(), objects, from);
  CHECK(&same == &objects);
  CHECK(objects == std::vector<std::string>(static_cast<std::size_t>(from + 1), "rank" + std::to_string(from)));
  std::tuple<int, std::string> t{r, "x"};
  dist::broadcast_object_list(state(), t, 0);
  CHECK(std::get<0>(t) == 0);
}

TEST_CASE("main_process_first runs the block everywhere and returns its value", "[dist][mpi]") {
  const int got = state().main_process_first([] { return rank() * 2; });
  CHECK(got == rank() * 2);
  state().local_main_process_first([] {});
  dist::wait_for_everyone(state());
}

TEST_CASE("save writes once: on the main process, or once per node", "[dist][mpi]") {
  // The main process names the folder; everybody learns it.
  std::optional<accel_test::TempDir> dir;
  std::vector<std::string> path{""};
  if (state().is_main_process()) {
    dir.emplace();
    path[0] = dir->str();
  }
  dist::broadcast_object_list(state(), path);
  accel::io::StateDict sd;
  sd.insert_or_assign("w", sample(DType::f32, rank(), Shape{2, 2}));
  for (const bool each_node : {false, true}) {
    const std::string file = path[0] + (each_node ? "/node.safetensors" : "/main.safetensors");
    dist::save(state(), sd, file, each_node, true);
    state().wait_for_everyone();
    CHECK(std::filesystem::exists(file));
    // The writer was the main process (one node here): its values are in the file.
    const auto loaded = accel::io::SafetensorsFile::open(file);
    CHECK(values(loaded.tensor("w")) == values(sample(DType::f32, 0, Shape{2, 2})));
  }
  state().wait_for_everyone();  // the main process removes the folder after everyone read it
}

namespace {
struct Model {
  int id = 7;
};
struct Wrapper {
  static constexpr bool is_parallel_wrapper = true;
  Model inner;
  Model& module() { return inner; }
};
struct OuterWrapper {
  static constexpr bool is_parallel_wrapper = true;
  Wrapper w;
  Wrapper& module() { return w; }
};
}  // namespace

TEST_CASE("extract_model_from_parallel unwraps every parallel wrapper", "[dist]") {
  OuterWrapper o;
  Model& m = dist::extract_model_from_parallel(o);
  CHECK(&m == &o.w.inner);
  Model plain;
  CHECK(&dist::extract_model_from_parallel(plain) == &plain);
}
