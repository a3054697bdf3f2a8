// module_from_spec: a weightless (meta) Module tree from an "accelerate-oracle-spec/v1" JSON model
// spec (module names and classes, parameters, buffers with their persistent flag, aliases, ties).
//
//   auto model = module_from_spec(json, "gpt2_tiny.json");   // or module_from_spec_file(path)
//
// Every tensor is on meta. Aliases register an already declared module a second time; ties make
// all names of a group share the cell of the group's first name. Malformed specs throw
// FormatError naming the file and the JSON path ($.root.children[2].params[0].shape).
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/core/dtype.hpp"
#include "accel/core/errors.hpp"
#include "accel/core/json_read.hpp"
#include "accel/core/limits.hpp"
#include "accel/core/tensor.hpp"
#include "accel/nn/module.hpp"

namespace accel::nn {

namespace detail {

class SpecBuilder {
 public:
  explicit SpecBuilder(std::string source) : source_(std::move(source)) {}

  std::shared_ptr<Module> build(const nlohmann::json& spec) {
    if (!spec.is_object()) fail("$", "the spec must be a JSON object");
    if (!spec.contains("format") || !spec["format"].is_string() ||
        spec["format"].get<std::string>() != "accelerate-oracle-spec/v1") {
      fail("$.format", "expected \"accelerate-oracle-spec/v1\"");
    }
    if (!spec.contains("root") || !spec["root"].is_object()) fail("$.root", "missing module object");
    const auto& root = spec["root"];
    if (root.contains("alias_of")) fail("$.root", "the root cannot be an alias");
    if (root.contains("name") && (!root["name"].is_string() || !root["name"].get<std::string>().empty())) {
      fail("$.root.name", "the root's name must be \"\"");
    }
    auto model = declare(root, "", "$.root", 1);
    link(root, *model, "", "$.root");
    if (spec.contains("no_split_modules")) {
      const auto& ns = spec["no_split_modules"];
      std::vector<std::string> classes;
      if (ns.is_string()) {
        classes.push_back(ns.get<std::string>());
      } else if (ns.is_array()) {
        for (std::size_t i = 0; i < ns.size(); ++i) {
          if (!ns[i].is_string()) fail("$.no_split_modules[" + std::to_string(i) + "]", "expected a class name");
          classes.push_back(ns[i].get<std::string>());
        }
      } else if (!ns.is_null()) {
        fail("$.no_split_modules", "expected a list of class names");
      }
      model->set_no_split_modules(std::move(classes));
    }
    if (spec.contains("tied")) tie(spec["tied"], *model);
    return model;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw FormatError(source_ + ": " + where + ": " + what);
  }

  std::string str_field(const nlohmann::json& j, const char* key, const std::string& where, bool required,
                        const std::string& fallback = {}) const {
    if (!j.contains(key)) {
      if (required) fail(where, std::string("missing \"") + key + "\"");
      return fallback;
    }
    if (!j[key].is_string()) fail(where + "." + key, "expected a string");
    return j[key].get<std::string>();
  }

  void check_local_name(const std::string& name, const std::string& where) const {
    if (name.empty() || name.find('.') != std::string::npos) {
      fail(where + ".name", "'" + name + "' is not a single non-empty path component");
    }
    if (name.size() > limits::max_name_bytes) {
      fail(where + ".name", "a name of " + std::to_string(name.size()) + " bytes (at most " +
                                std::to_string(limits::max_name_bytes) + ")");
    }
  }

  Tensor meta_tensor(const nlohmann::json& t, const std::string& where, DType& dtype) const {
    if (!t.contains("shape") || !t["shape"].is_array()) fail(where + ".shape", "expected a list of integers");
    Shape shape;
    const auto& js = t["shape"];
    if (js.size() > max_dims) fail(where + ".shape", "more than " + std::to_string(max_dims) + " dimensions");
    for (std::size_t i = 0; i < js.size(); ++i) {
      if (!js[i].is_number_integer() || js[i].get<std::int64_t>() < 0) {
        fail(where + ".shape[" + std::to_string(i) + "]", "expected a non-negative integer");
      }
      shape.push_back(js[i].get<std::int64_t>());
    }
    const std::string dname = str_field(t, "dtype", where, false, "float32");
    auto d = try_dtype_from_string(dname);
    if (!d) fail(where + ".dtype", "unknown dtype '" + dname + "'");
    dtype = *d;
    try {
      return Tensor::empty(shape, dtype, Device::meta());
    } catch (const Error& e) {
      fail(where + ".shape", e.what());
    }
  }

  // Pass 1: every declared (non-alias) module with its own tensors.
  // The recursion is as deep as the spec's nesting, so the nesting is capped before it can
  // exhaust the stack; link() walks the same tree and needs no check of its own.
  std::shared_ptr<Module> declare(const nlohmann::json& j, const std::string& path, const std::string& where,
                                  std::size_t depth) {
    if (!j.is_object()) fail(where, "expected a module object");
    if (depth > limits::max_module_depth) {
      fail(where, "modules nest deeper than " + std::to_string(limits::max_module_depth) + " levels");
    }
    auto m = std::make_shared<Module>(str_field(j, "class", where, true));
    declared_[path] = m;
    for (const char* kind : {"params", "buffers"}) {
      if (!j.contains(kind)) continue;
      const auto& list = j[kind];
      if (!list.is_array()) fail(where + "." + kind, "expected a list");
      for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string w = where + "." + kind + "[" + std::to_string(i) + "]";
        if (!list[i].is_object()) fail(w, "expected a tensor object");
        const std::string name = str_field(list[i], "name", w, true);
        check_local_name(name, w);
        if (m->has_parameter(name) || m->has_buffer(name)) fail(w + ".name", "'" + name + "' is declared twice");
        DType dtype{};
        Tensor t = meta_tensor(list[i], w, dtype);
        if (kind[0] == 'p') {
          m->register_parameter(name, std::move(t), is_floating_point(dtype));
        } else {
          bool persistent = true;
          if (list[i].contains("persistent")) {
            if (!list[i]["persistent"].is_boolean()) fail(w + ".persistent", "expected true or false");
            persistent = list[i]["persistent"].get<bool>();
          }
          m->register_buffer(name, std::move(t), persistent);
        }
      }
    }
    if (j.contains("children")) {
      const auto& ch = j["children"];
      if (!ch.is_array()) fail(where + ".children", "expected a list");
      for (std::size_t i = 0; i < ch.size(); ++i) {
        const std::string w = where + ".children[" + std::to_string(i) + "]";
        if (!ch[i].is_object()) fail(w, "expected a module object");
        const std::string name = str_field(ch[i], "name", w, true);
        check_local_name(name, w);
        if (ch[i].contains("alias_of")) continue;
        declare(ch[i], path.empty() ? name : path + "." + name, w, depth + 1);
      }
    }
    return m;
  }

  // Pass 2: children in registration order, aliases resolved against every declared module.
  void link(const nlohmann::json& j, Module& m, const std::string& path, const std::string& where) {
    if (!j.contains("children")) return;
    const auto& ch = j["children"];
    for (std::size_t i = 0; i < ch.size(); ++i) {
      const std::string w = where + ".children[" + std::to_string(i) + "]";
      const std::string name = ch[i]["name"].get<std::string>();
      if (m.child_slots().size() > 0) {
        for (const auto& s : m.child_slots()) {
          if (s.name == name) fail(w + ".name", "child '" + name + "' is declared twice");
        }
      }
      if (m.has_parameter(name) || m.has_buffer(name)) fail(w + ".name", "'" + name + "' is already a tensor name");
      const std::string child_path = path.empty() ? name : path + "." + name;
      if (ch[i].contains("alias_of")) {
        const std::string target = str_field(ch[i], "alias_of", w, true);
        auto it = declared_.find(target);
        if (it == declared_.end()) fail(w + ".alias_of", "no declared module at '" + target + "'");
        if (target.empty() || path == target || path.starts_with(target + ".")) {
          fail(w + ".alias_of", "'" + target + "' is an ancestor of '" + child_path + "' (a cycle)");
        }
        m.register_module(name, it->second);
      } else {
        auto child = declared_.at(child_path);
        m.register_module(name, child);
        link(ch[i], *child, child_path, w);
      }
    }
  }

  void tie(const nlohmann::json& tied, Module& model) const {
    if (tied.is_null()) return;
    if (!tied.is_array()) fail("$.tied", "expected a list of groups");
    for (std::size_t g = 0; g < tied.size(); ++g) {
      const std::string wg = "$.tied[" + std::to_string(g) + "]";
      if (!tied[g].is_array() || tied[g].size() < 2) fail(wg, "expected a list of at least 2 parameter names");
      std::vector<ParameterPtr*> slots;
      for (std::size_t i = 0; i < tied[g].size(); ++i) {
        const std::string w = wg + "[" + std::to_string(i) + "]";
        if (!tied[g][i].is_string()) fail(w, "expected a parameter name");
        const std::string name = tied[g][i].get<std::string>();
        try {
          slots.push_back(&model.parameter_cell(name));
        } catch (const KeyError& e) {
          fail(w, "'" + name + "' is not a declared parameter (" + e.what() + ")");
        }
        const Tensor& first = (*slots.front())->data;
        const Tensor& t = (*slots.back())->data;
        if (t.shape() != first.shape() || t.dtype() != first.dtype()) {
          fail(w, "'" + name + "' is " + t.shape().str() + " " + std::string(dtype_name(t.dtype())) + " but '" +
                      tied[g][0].get<std::string>() + "' is " + first.shape().str() + " " +
                      std::string(dtype_name(first.dtype())) + " (tied parameters share shape and dtype)");
        }
      }
      const ParameterPtr owner = *slots.front();
      for (auto* s : slots) *s = owner;
    }
  }

  std::string source_;
  std::map<std::string, std::shared_ptr<Module>> declared_;
};

}  // namespace detail

/// The meta Module tree of a model spec; `source` names the spec in error messages.
inline std::shared_ptr<Module> module_from_spec(const nlohmann::json& spec, const std::string& source = "<spec>") {
  return detail::SpecBuilder(source).build(spec);
}

/// As module_from_spec, reading the JSON file at `path` with read_json_file's bounds (FormatError
/// on invalid or too deeply nested JSON, IOError when it is not a readable regular file).
inline std::shared_ptr<Module> module_from_spec_file(const std::filesystem::path& path) {
  return module_from_spec(read_json_file(path.string()), path.string());
}

}  // namespace accel::nn
