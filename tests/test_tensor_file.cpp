// io::save / io::load: tensors and named sets through .h5, .npy and .npz, every dtype and
// layout, exchanged with NumPy and h5py both ways (when /usr/bin/python3 has them), and
// damaged or foreign files refused naming the file and what is wrong.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "io/tensor_file.h"
#include "nn/layers.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// The tensors every format must carry whole: each dtype, 0-dim, empty, non-contiguous.
io::NamedTensors samples() {
  return {{"f32", arange(0, 6, 1, kFloat32).view({2, 3})},
          {"f64", tensor({0.1, -1e300, 5e-324}, kFloat64)},
          {"i64", tensor({INT64_MIN, int64_t(-1), INT64_MAX})},
          {"bool", tensor({true, false, true})},
          {"scalar", tensor(2.5, kFloat64)},
          {"empty", zeros({0, 3})},
          {"strided", arange(0, 12, 1, kFloat64).view({3, 4}).t()}};
}

bool python_has(const std::string& modules) {
  return std::system(("/usr/bin/python3 -c 'import " + modules + "' 2>/dev/null").c_str()) == 0;
}

}  // namespace

TEST_CASE("io::save and io::load carry every dtype, shape and layout whole through .h5, .npy and .npz") {
  ScratchDir dir;
  for (const char* ext : {".h5", ".npz"}) {
    INFO(ext);
    const std::string path = dir.file(std::string("set") + ext);
    io::save(path, samples());
    const io::NamedTensors back = io::load_named(path);
    REQUIRE(back.size() == samples().size());
    for (const auto& sample : samples()) {
      const std::string& name = sample.first;
      const Tensor& t = sample.second;
      INFO(name);
      auto it = std::find_if(back.begin(), back.end(), [&](const auto& p) { return p.first == name; });
      REQUIRE(it != back.end());
      CHECK(it->second.dtype() == t.dtype());
      CHECK(equal(it->second, t.contiguous()));
    }
    if (std::string(ext) == ".npz") {  // in the order given
      for (size_t i = 0; i < back.size(); i++) CHECK(back[i].first == samples()[i].first);
    }
  }
  for (const auto& [name, t] : samples()) {
    const std::string path = dir.file(name + ".npy");
    io::save(path, t);
    const Tensor back = io::load(path);
    CHECK(back.dtype() == t.dtype());
    CHECK(equal(back, t.contiguous()));
  }
  // one tensor in .h5 and .npz too
  io::save(dir.file("one.h5"), ones({2}));
  CHECK(io::load_named(dir.file("one.h5"))[0].first == "tensor");
  io::save(dir.file("one.npz"), ones({2}));
  CHECK(io::load_named(dir.file("one.npz"))[0].first == "arr_0");
  // the same tensors give the same bytes
  io::save(dir.file("a.npz"), samples());
  io::save(dir.file("b.npz"), samples());
  CHECK(read_bytes(dir.file("a.npz")) == read_bytes(dir.file("b.npz")));
}

TEST_CASE("a module's state_dict is saved and loaded in one call each way") {
  ScratchDir dir;
  Generator g(3);
  nn::Linear a(4, 3, true, &g), b(4, 3, true, &g);
  for (const char* ext : {".h5", ".npz"}) {
    io::save(dir.file(std::string("w") + ext), a.state_dict());
    b.load_state_dict(io::load_dict(dir.file(std::string("w") + ext)));
    CHECK(equal(b.weight, a.weight));
    CHECK(equal(b.bias, a.bias));
  }
  // names with '/' make groups in HDF5 and are refused by .npz
  io::save(dir.file("g.h5"), {{"enc/w", ones({2})}, {"enc/b", zeros({1})}});
  CHECK(io::load_named(dir.file("g.h5"))[1].first == "enc/w");
  CHECK_THAT(error_of([&] { io::save(dir.file("g.npz"), {{"enc/w", ones({2})}}); }), Contains("holds '/'"));
}

TEST_CASE("io::save and io::load refuse what they cannot do, naming the file") {
  ScratchDir dir;
  const std::string p = dir.file("x.npy");
  CHECK_THAT(error_of([&] { io::save(dir.file("x.txt"), ones({1})); }),
             StartsWith("io::save: '" + dir.file("x.txt") + "': the extension names no format ember knows"));
  CHECK_THAT(error_of([&] { io::save(p, io::NamedTensors{{"a", ones({1})}}); }), Contains("a .npy file holds one tensor"));
  CHECK_THAT(error_of([&] { io::save(dir.file("d.h5"), {{"a", ones({1})}, {"a", ones({1})}}); }), Contains("appears twice"));
  CHECK_THAT(error_of([&] { io::save(dir.file("d.h5"), {{"a", ones({1})}, {"a/b", ones({1})}}); }),
             Contains("names a tensor and also a group"));
  CHECK_THAT(error_of([&] { io::save(dir.file("d.h5"), {{"", ones({1})}}); }), Contains("is empty"));
  CHECK_THAT(error_of([&] { io::save(dir.file("d.h5"), {{"u", Tensor()}}); }), StartsWith("io::save: tensor 'u' is undefined"));
  CHECK_THAT(error_of([&] { io::load(dir.file("missing.npy")); }), StartsWith("io::load: cannot open"));
  CHECK_THAT(error_of([&] { io::load_dict(dir.file("missing.npz")); }), StartsWith("io::load_dict: cannot open"));
  CHECK_THAT(error_of([&] { io::load_named(dir.file("missing.h5")); }), StartsWith("io::load_named: cannot open"));
  CHECK_THAT(error_of([&] { io::load(dir.path.string()); }), Contains("the extension names no format"));
  io::save(dir.file("two.npz"), {{"a", ones({1})}, {"b", ones({1})}});
  CHECK_THAT(error_of([&] { io::load(dir.file("two.npz")); }), Contains("holds 2 tensors (a, b)"));

  // damaged .npy files
  io::save(p, arange(0, 6, 1, kFloat64));
  const std::vector<uint8_t> good = read_bytes(p);
  auto refused = [&](std::vector<uint8_t> b, const std::string& expected) {
    write_bytes(p, b);
    CHECK_THAT(error_of([&] { io::load(p); }), StartsWith("io::load: '" + p + "'") && Contains(expected));
  };
  refused({good.begin(), good.end() - 1}, "bytes of data follow");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  refused(longer, "bytes of data follow");
  refused({good.begin(), good.begin() + 20}, "is truncated");
  std::vector<uint8_t> magic = good;
  magic[1] = 'X';
  refused(magic, "is not a .npy file");
  auto with_header = [&](const std::string& header) {
    std::string h = header;
    h += std::string((64 - (10 + h.size() + 1) % 64) % 64, ' ') + "\n";
    std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, uint8_t(h.size()), uint8_t(h.size() >> 8)};
    b.insert(b.end(), h.begin(), h.end());
    b.resize(b.size() + 6 * 8);
    return b;
  };
  refused(with_header("{'descr': '>f8', 'fortran_order': False, 'shape': (6,), }"), "is big-endian");
  refused(with_header("{'descr': '<c16', 'fortran_order': False, 'shape': (3,), }"), "is not one ember reads");
  refused(with_header("{'descr': '<f8', 'fortran_order': False, }"), "no 'descr', 'fortran_order' or 'shape' key");
  refused(with_header("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (6,), }"), "no True or False");
  refused(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (-6,), }"), "not a non-negative integer");
  refused(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (6,), 'x': 1}"), "an unexpected or repeated key 'x'");
  refused(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
          "has more elements than ember holds");
  std::vector<uint8_t> bools = with_header("{'descr': '|b1', 'fortran_order': False, 'shape': (48,), }");
  bools.back() = 7;
  refused(bools, "element 47 of a bool array holds 7, not 0 or 1");

  // damaged .npz files
  const std::string z = dir.file("x.npz");
  io::save(z, {{"w", arange(0, 6, 1, kFloat64)}});
  const std::vector<uint8_t> zgood = read_bytes(z);
  auto zrefused = [&](std::vector<uint8_t> b, const std::string& expected) {
    write_bytes(z, b);
    CHECK_THAT(error_of([&] { io::load_named(z); }), StartsWith("io::load_named: '" + z + "'") && Contains(expected));
  };
  std::vector<uint8_t> flipped = zgood;
  flipped[100] ^= 1;  // inside the array's data
  zrefused(flipped, "fails its CRC-32 check");
  zrefused({zgood.begin(), zgood.end() - 30}, "has no zip end record");
  zrefused({zgood.begin() + 10, zgood.end()}, "");
  zrefused({}, "too short for a zip archive");
  std::vector<uint8_t> encrypted = zgood;
  const size_t central = zgood.size() - 22 - (46 + 5);  // one member named "w.npy"
  encrypted[central + 8] |= 1;
  zrefused(encrypted, "is encrypted");
  std::vector<uint8_t> bomb = zgood;
  bomb[central + 10] = 8;                                     // deflated
  bomb[central + 24] = 0, bomb[central + 25] = 0, bomb[central + 26] = 0, bomb[central + 27] = 0x40;  // 1 GiB
  zrefused(bomb, "claim 1073741824 bytes");
}

TEST_CASE("a name no format can hold is refused before the file is touched, and a zip whose members share bytes is refused") {
  ScratchDir dir;
  const std::string z = dir.file("long.npz");
  io::save(z, {{"good", ones({2})}});
  const std::vector<uint8_t> before = read_bytes(z);
  CHECK_THAT(error_of([&] { io::save(z, {{std::string(65532, 'x'), ones({2})}}); }), Contains("more than a zip member's name holds"));
  CHECK(read_bytes(z) == before);  // the good file is still there
  for (const std::string bad : {".", "..", "a/..", "./a", "a/./b", "a//b"}) {
    INFO(bad);
    CHECK_THAT(error_of([&] { io::save(dir.file("n.h5"), {{bad, ones({1})}}); }), Contains("is not a path of plain names"));
  }
  CHECK_THAT(error_of([&] { io::save(dir.file("n.npz"), {{"..", ones({1})}}); }), Contains("is not a plain name"));
  // one member's bytes claimed by two names: the second central entry points at the first member
  io::save(z, {{"a", zeros({64}, kFloat64)}, {"b", zeros({64}, kFloat64)}});
  std::vector<uint8_t> shared = read_bytes(z);
  const size_t eocd = shared.size() - 22;
  const size_t central = shared[eocd + 16] | shared[eocd + 17] << 8 | shared[eocd + 18] << 16 | (size_t)shared[eocd + 19] << 24;
  const size_t second = central + 46 + 5;  // past the first entry, named "a.npy"
  for (int i = 0; i < 4; i++) shared[second + 42 + i] = 0;  // its local header: the first member's
  write_bytes(z, shared);
  CHECK_THAT(error_of([&] { io::load_named(z); }), Contains("local header names another member"));
  shared[second + 46] = 'a';  // and named as the first: then the two share bytes
  write_bytes(z, shared);
  CHECK_THAT(error_of([&] { io::load_named(z); }), Contains("appears twice") || Contains("share bytes"));
  // text after a .npy header's closing brace
  const std::string p = dir.file("x.npy");
  io::save(p, ones({2}, kFloat64));
  std::vector<uint8_t> b = read_bytes(p);
  const size_t close = std::string(b.begin(), b.end()).find('}');
  b[close + 2] = 'Z';
  write_bytes(p, b);
  CHECK_THAT(error_of([&] { io::load(p); }), Contains("text after its closing '}'"));
}

TEST_CASE("NumPy and h5py read what ember writes, and ember reads what they write") {
  if (!python_has("numpy, h5py")) {
    WARN("skipped: /usr/bin/python3 lacks numpy or h5py");
    return;
  }
  ScratchDir dir;
  io::save(dir.file("e.npz"), samples());
  io::save(dir.file("e.h5"), samples());
  io::save(dir.file("e.npy"), arange(0, 12, 1, kFloat64).view({3, 4}).t());
  const std::string script = dir.file("check.py");
  std::ofstream(script) << R"(import sys, numpy as np, h5py
d = sys.argv[1]
expected = {
    "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
    "f64": np.array([0.1, -1e300, 5e-324]),
    "i64": np.array([-2**63, -1, 2**63 - 1], dtype=np.int64),
    "bool": np.array([True, False, True]),
    "scalar": np.array(2.5),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "strided": np.arange(12.0).reshape(3, 4).T,
}
z = np.load(d + "/e.npz")
assert list(z.keys()) == list(expected), list(z.keys())
with h5py.File(d + "/e.h5", "r") as h:
    for k, v in expected.items():
        for got in (z[k], np.asarray(h[k][()], dtype=v.dtype)):
            assert got.dtype == v.dtype and got.shape == v.shape and np.array_equal(got, v), (k, got, v)
assert np.array_equal(np.load(d + "/e.npy"), expected["strided"])
np.save(d + "/fortran.npy", np.asfortranarray(np.arange(6.0).reshape(2, 3)))
np.save(d + "/i32.npy", np.array([[-7, 8]], dtype=np.int32))
np.save(d + "/u8.npy", np.array([255, 0], dtype=np.uint8))
np.save(d + "/b.npy", np.array([True, False]))
np.savez(d + "/plain.npz", a=np.float32(1.5), b=np.array([1, 2], dtype=np.int16))
np.savez_compressed(d + "/packed.npz", x=np.zeros((100, 100)), y=np.arange(5.0))
with h5py.File(d + "/py.h5", "w") as h:
    h["flags"] = np.array([[True, False, True]])
    h["counts"] = np.array([3, -4], dtype=np.int32)
with h5py.File(d + "/links.h5", "w") as h:  # a group linked from inside itself, and twice
    g = h.create_group("g")
    g["x"] = np.ones(2, dtype=np.float32)
    g["back"] = h["g"]
    h["again"] = h["g"]
)";
  REQUIRE(std::system(("/usr/bin/python3 " + script + " " + dir.path.string()).c_str()) == 0);
  CHECK(equal(io::load(dir.file("fortran.npy")), arange(0, 6, 1, kFloat64).view({2, 3})));
  CHECK(io::load(dir.file("i32.npy")).to_vector<int64_t>() == std::vector<int64_t>{-7, 8});
  CHECK(io::load(dir.file("i32.npy")).shape() == Shape{1, 2});
  CHECK(io::load(dir.file("u8.npy")).to_vector<int64_t>() == std::vector<int64_t>{255, 0});
  CHECK(io::load(dir.file("b.npy")).dtype() == kBool);
  const io::NamedTensors plain = io::load_named(dir.file("plain.npz"));
  REQUIRE(plain.size() == 2);
  CHECK(plain[0].first == "a");
  CHECK(plain[0].second.item() == 1.5);
  CHECK(plain[1].second.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  const io::NamedTensors py = io::load_named(dir.file("py.h5"));  // h5py's bool is an enum
  REQUIRE(py.size() == 2);
  CHECK(py[0].first == "counts");
  CHECK(py[0].second.to_vector<int64_t>() == std::vector<int64_t>{3, -4});
  CHECK(py[1].first == "flags");
  CHECK(py[1].second.dtype() == kBool);
  CHECK(py[1].second.shape() == Shape{1, 3});
  CHECK(py[1].second.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  const io::NamedTensors linked = io::load_named(dir.file("links.h5"));  // each object once, no endless walk
  REQUIRE(linked.size() == 1);
  CHECK(linked[0].first == "again/x");
  const io::NamedTensors packed = io::load_named(dir.file("packed.npz"));
  REQUIRE(packed.size() == 2);
  CHECK(equal(packed[0].second, zeros({100, 100}, kFloat64)));
  CHECK(equal(packed[1].second, arange(0, 5, 1, kFloat64)));
}
