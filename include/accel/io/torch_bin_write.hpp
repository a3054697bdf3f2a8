// PyTorch checkpoint writer: torch.save(state_dict) layout (zip of stored entries, protocol-2
// pickle), loadable by torch.load and by load_torch_bin.
//
//   save_torch_bin(state_dict, "pytorch_model.bin");
//
// Records, in torch's order: archive/data.pkl, archive/.format_version, archive/.storage_alignment,
// archive/byteorder, archive/data/<key>..., archive/version; each entry's data aligned to 64 bytes
// with a "FB" padding extra field, zip64 end records, CRC-32 on every entry. Tensors that share a
// host storage share one record (views keep offset and strides); GPU tensors are copied to the
// host. The file appears atomically.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accel/core/errors.hpp"
#include "accel/core/tensor.hpp"
#include "accel/io/bytes.hpp"
#include "accel/io/state_dict.hpp"
#include "accel/io/torch_bin.hpp"

namespace accel::io {

/// CRC-32 (IEEE 802.3, zip's checksum) of `n` bytes, continuing from `crc`.
inline std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

namespace detail {

/// Protocol-2 pickle emitter with a memo, enough for torch state dicts.
class PickleWriter {
 public:
  std::string out;
  void proto() { out += "\x80\x02"; }
  void global(const std::string& module, const std::string& name) {
    const std::string key = module + "\n" + name + "\n";
    if (auto it = globals_.find(key); it != globals_.end()) {
      get(it->second);
      return;
    }
    out += "c" + key;
    globals_.emplace(key, put());
  }
  void str(const std::string& s) {
    out += 'X';
    store_le<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
    out += s;
    put();
  }
  void integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out += 'K';
      out += static_cast<char>(v);
    } else if (v >= 0 && v < 65536) {
      out += 'M';
      store_le<std::uint16_t>(out, static_cast<std::uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out += 'J';
      store_le<std::uint32_t>(out, static_cast<std::uint32_t>(static_cast<std::int32_t>(v)));
    } else {  // LONG1, minimal two's complement (8 bytes always suffice here)
      out += "\x8a\x08";
      store_le<std::uint64_t>(out, static_cast<std::uint64_t>(v));
    }
  }
  void int_tuple(const Shape& s) {
    if (s.size() == 0) {
      out += ')';
      return;
    }
    if (s.size() > 3) out += '(';
    for (auto v : s) integer(v);
    static const char small[] = {0, '\x85', '\x86', '\x87'};
    out += s.size() <= 3 ? small[s.size()] : 't';
    put();
  }
  std::uint32_t put() {
    const std::uint32_t id = next_++;
    if (id < 256) {
      out += 'q';
      out += static_cast<char>(id);
    } else {
      out += 'r';
      store_le<std::uint32_t>(out, id);
    }
    return id;
  }
  void get(std::uint32_t id) {
    if (id < 256) {
      out += 'h';
      out += static_cast<char>(id);
    } else {
      out += 'j';
      store_le<std::uint32_t>(out, id);
    }
  }

 private:
  std::map<std::string, std::uint32_t> globals_;
  std::uint32_t next_ = 0;
};

/// Writes stored zip entries aligned to 64 bytes, then the directory with zip64 end records.
class ZipWriter {
 public:
  explicit ZipWriter(AtomicFile& f) : f_(f) {}

  void add(const std::string& name, const void* data, std::size_t n) {
    const std::uint32_t crc = crc32(data, n);
    const bool big = n >= 0xFFFFFFFFu || pos_ >= 0xFFFFFFFFu;
    std::string h;
    store_le<std::uint32_t>(h, 0x04034b50);
    store_le<std::uint16_t>(h, big ? 45 : 20);
    store_le<std::uint16_t>(h, 0);  // flags
    store_le<std::uint16_t>(h, 0);  // stored
    store_le<std::uint32_t>(h, 0);  // time, date
    store_le<std::uint32_t>(h, crc);
    store_le<std::uint32_t>(h, big ? 0xFFFFFFFFu : static_cast<std::uint32_t>(n));
    store_le<std::uint32_t>(h, big ? 0xFFFFFFFFu : static_cast<std::uint32_t>(n));
    store_le<std::uint16_t>(h, static_cast<std::uint16_t>(name.size()));
    std::string extra;
    if (big) {
      store_le<std::uint16_t>(extra, 0x0001);
      store_le<std::uint16_t>(extra, 16);
      store_le<std::uint64_t>(extra, n);
      store_le<std::uint64_t>(extra, n);
    }
    // "FB" padding field so the data starts on a 64-byte boundary (torch's alignment).
    const std::uint64_t base = pos_ + 30 + name.size() + extra.size() + 4;
    const std::uint64_t pad = (64 - base % 64) % 64;
    store_le<std::uint16_t>(extra, 0x4246);
    store_le<std::uint16_t>(extra, static_cast<std::uint16_t>(pad));
    extra.append(static_cast<std::size_t>(pad), 'Z');
    store_le<std::uint16_t>(h, static_cast<std::uint16_t>(extra.size()));
    h += name;
    h += extra;
    entries_.push_back({name, pos_, n, crc});
    f_.write(h);
    f_.write(data, n);
    pos_ += h.size() + n;
  }

  void finish() {
    const std::uint64_t cd_start = pos_;
    std::string cd;
    for (const auto& e : entries_) {
      const bool big = e.size >= 0xFFFFFFFFu || e.offset >= 0xFFFFFFFFu;
      store_le<std::uint32_t>(cd, 0x02014b50);
      store_le<std::uint16_t>(cd, 45);
      store_le<std::uint16_t>(cd, big ? 45 : 20);
      store_le<std::uint16_t>(cd, 0);
      store_le<std::uint16_t>(cd, 0);
      store_le<std::uint32_t>(cd, 0);
      store_le<std::uint32_t>(cd, e.crc);
      store_le<std::uint32_t>(cd, big ? 0xFFFFFFFFu : static_cast<std::uint32_t>(e.size));
      store_le<std::uint32_t>(cd, big ? 0xFFFFFFFFu : static_cast<std::uint32_t>(e.size));
      store_le<std::uint16_t>(cd, static_cast<std::uint16_t>(e.name.size()));
      store_le<std::uint16_t>(cd, big ? 28 : 0);
      store_le<std::uint16_t>(cd, 0);  // comment
      store_le<std::uint16_t>(cd, 0);  // disk
      store_le<std::uint16_t>(cd, 0);  // internal attributes
      store_le<std::uint32_t>(cd, 0);  // external attributes
      store_le<std::uint32_t>(cd, big ? 0xFFFFFFFFu : static_cast<std::uint32_t>(e.offset));
      cd += e.name;
      if (big) {
        store_le<std::uint16_t>(cd, 0x0001);
        store_le<std::uint16_t>(cd, 24);
        store_le<std::uint64_t>(cd, e.size);
        store_le<std::uint64_t>(cd, e.size);
        store_le<std::uint64_t>(cd, e.offset);
      }
    }
    const std::uint64_t z64 = cd_start + cd.size();
    std::string end;
    store_le<std::uint32_t>(end, 0x06064b50);
    store_le<std::uint64_t>(end, 44);
    store_le<std::uint16_t>(end, 45);
    store_le<std::uint16_t>(end, 45);
    store_le<std::uint32_t>(end, 0);
    store_le<std::uint32_t>(end, 0);
    store_le<std::uint64_t>(end, entries_.size());
    store_le<std::uint64_t>(end, entries_.size());
    store_le<std::uint64_t>(end, cd.size());
    store_le<std::uint64_t>(end, cd_start);
    store_le<std::uint32_t>(end, 0x07064b50);
    store_le<std::uint32_t>(end, 0);
    store_le<std::uint64_t>(end, z64);
    store_le<std::uint32_t>(end, 1);
    store_le<std::uint32_t>(end, 0x06054b50);
    store_le<std::uint16_t>(end, 0);
    store_le<std::uint16_t>(end, 0);
    store_le<std::uint16_t>(end, 0xFFFF);
    store_le<std::uint16_t>(end, 0xFFFF);
    store_le<std::uint32_t>(end, 0xFFFFFFFFu);
    store_le<std::uint32_t>(end, 0xFFFFFFFFu);
    store_le<std::uint16_t>(end, 0);
    f_.write(cd);
    f_.write(end);
  }

 private:
  struct Entry {
    std::string name;
    std::uint64_t offset, size;
    std::uint32_t crc;
  };
  AtomicFile& f_;
  std::uint64_t pos_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace detail

namespace detail {

/// The whole archive written under its temporary name and synced, not yet renamed into place, so
/// a caller can stage several files and publish them together.
inline std::unique_ptr<AtomicFile> stage_torch_bin(const StateDict& state, const std::string& path,
                                                   const std::string& archive_name) {
  struct Record {
    Tensor host;  // a tensor covering the whole storage bytes, on the host
    DType dtype;
  };
  std::vector<Record> records;
  std::map<const StorageImpl*, std::size_t> by_storage;
  struct Item {
    std::size_t record;
    Tensor view;
  };
  std::vector<std::pair<std::string, Item>> items;
  for (const auto& [name, t] : state) {
    if (!t.defined() || t.is_meta()) throw ValueError("save_torch_bin('" + path + "'): tensor '" + name + "' has no data");
    if (t.is_cpu()) {
      auto [it, fresh] = by_storage.emplace(t.storage().get(), records.size());
      if (fresh) {
        if (t.storage().nbytes() % t.element_size() != 0) {
          throw ValueError("save_torch_bin: storage of '" + name + "' is not a whole number of " +
                           std::string(dtype_name(t.dtype())) + " elements");
        }
        const Shape whole{static_cast<std::int64_t>(t.storage().nbytes() / t.element_size())};
        records.push_back({Tensor::from_storage(t.storage(), t.dtype(), whole), t.dtype()});
      } else if (records[it->second].dtype != t.dtype()) {
        throw ValueError("save_torch_bin: '" + name + "' views a storage already saved as " +
                         std::string(dtype_name(records[it->second].dtype)) + " with dtype " +
                         std::string(dtype_name(t.dtype())));
      }
      items.push_back({name, {it->second, t}});
    } else {
      Tensor h = t.to(Device::cpu()).contiguous();
      records.push_back({h, h.dtype()});
      items.push_back({name, {records.size() - 1, h}});
    }
  }

  detail::PickleWriter p;
  p.proto();
  p.global("collections", "OrderedDict");
  p.out += ')';
  p.out += 'R';
  p.put();
  if (items.size() > 1) p.out += '(';
  for (const auto& [name, item] : items) {
    const Tensor& v = item.view;
    p.str(name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.out += "((";
    p.str("storage");
    p.global("torch", torch_storage_class(v.dtype()));
    p.str(std::to_string(item.record));
    p.str("cpu");
    p.integer(records[item.record].host.numel());
    p.out += 't';
    p.put();
    p.out += 'Q';  // BINPERSID results are not memoized
    p.integer(v.storage_offset());
    p.int_tuple(v.shape());
    p.int_tuple(v.strides());
    p.out += '\x89';  // requires_grad = False
    p.global("collections", "OrderedDict");
    p.out += ')';
    p.out += 'R';
    p.put();
    p.out += 't';
    p.put();
    p.out += 'R';
    p.put();
  }
  if (items.size() > 1) p.out += 'u';  // SETITEMS
  if (items.size() == 1) p.out += 's';  // SETITEM
  p.out += '.';

  auto out = std::make_unique<AtomicFile>(path);
  AtomicFile& f = *out;
  detail::ZipWriter z(f);
  const std::string pre = archive_name + "/";
  z.add(pre + "data.pkl", p.out.data(), p.out.size());
  z.add(pre + ".format_version", "1", 1);
  z.add(pre + ".storage_alignment", "64", 2);
  z.add(pre + "byteorder", "little", 6);
  for (std::size_t i = 0; i < records.size(); ++i) {
    z.add(pre + "data/" + std::to_string(i), records[i].host.data_ptr(), records[i].host.nbytes());
  }
  z.add(pre + "version", "3\n", 2);
  z.finish();
  f.sync();
  return out;
}

}  // namespace detail

/// Writes `state` as torch.save would (protocol 2), atomically. `archive_name` is the folder
/// inside the zip. ValueError for meta tensors or storages viewed with two dtypes.
inline void save_torch_bin(const StateDict& state, const std::string& path, const std::string& archive_name = "archive") {
  detail::stage_torch_bin(state, path, archive_name)->commit();
}

}  // namespace accel::io
