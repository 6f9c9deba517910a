// Hostile HDF5 files and careless callers: ember reads only data held in the file itself
// (no external links, soft links, external raw storage or virtual datasets), refuses a
// file that is no checkpoint before reading the rest of it, and refuses to write what it
// could not read back whole (strings holding NUL, steps no checkpoint name holds,
// undefined tensors, null generators), naming the function and the key.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/checkpoint.h"
#include "io/h5.h"
#include "nn/layers.h"

using namespace ember;
using namespace ember::io;
using namespace ember::testing;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

// A file written with the HDF5 C API: /data holds four float64 values; edit adds the
// hostile part.
void write_raw(const std::string& path, const std::function<void(hid_t)>& edit = [](hid_t) {}) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hsize_t dims[1] = {4};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t d = H5Dcreate2(f, "/data", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const double values[4] = {1, 2, 3, 4};
  REQUIRE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0);
  H5Dclose(d);
  H5Sclose(space);
  edit(f);
  REQUIRE(H5Fclose(f) >= 0);
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Rewrites a checkpoint's 512-byte header so that size and checksum match its edited body.
void reseal(const std::string& path) {
  std::vector<uint8_t> b = read_bytes(path);
  REQUIRE(b.size() > 512);
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b.data() + 512, (uInt)(b.size() - 512));
  char header[512] = {0};
  std::snprintf(header, sizeof header, "ember checkpoint\nschema 1\nsize %zu\ncrc32 %08x\n", b.size(), crc);
  std::memcpy(b.data(), header, 512);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), (std::streamsize)b.size());
}

struct Model : nn::Module {
  std::shared_ptr<nn::Linear> proj;
  Model() {
    Generator g(3);
    proj = register_module("proj", std::make_shared<nn::Linear>(4, 3, true, &g));
  }
};

// A saved checkpoint of Model whose HDF5 body edit changes (the header is then resealed).
void edited_checkpoint(const std::string& path, const std::function<void(hid_t)>& edit) {
  Model m;
  save_checkpoint(path, make_checkpoint(m.state_dict(), nullptr, nullptr, {}, {}));
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  edit(f);
  REQUIRE(H5Fclose(f) >= 0);
  reseal(path);
}

// A FIFO that nothing may open for reading. A reader that does wait on it is let go
// (again and again) after a while, so a test fails instead of hanging; stop() says
// whether any reader waited.
struct FifoWatch {
  std::string path;
  std::atomic<bool> done{false}, reader_was_waiting{false};
  std::thread watchdog;
  explicit FifoWatch(std::string p) : path(std::move(p)) {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    watchdog = std::thread([this] {
      for (int i = 0; i < 100 && !done; i++) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      while (!done) {
        int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // succeeds only with a reader on the other end
        if (fd >= 0) reader_was_waiting = true, ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  bool stop() {
    done = true;
    if (watchdog.joinable()) watchdog.join();
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) reader_was_waiting = true, ::close(fd);
    return reader_was_waiting;
  }
  ~FifoWatch() { stop(); }
};

}  // namespace

TEST_CASE("h5::Reader refuses an external link, naming the file, the key and the target") {
  ScratchDir dir;
  write_raw(dir.file("other.h5"));
  write_raw(dir.file("x.h5"), [&](hid_t f) {
    REQUIRE(H5Lcreate_external(dir.file("other.h5").c_str(), "/data", f, "/linked", H5P_DEFAULT, H5P_DEFAULT) >= 0);
  });
  h5::Reader r(dir.file("x.h5"));
  REQUIRE(r.read("/data").numel() == 4);  // the file's own data still reads
  for (auto& f : std::vector<std::function<void()>>{[&] { r.read("/linked"); }, [&] { r.is_dataset("/linked"); },
                                                    [&] { r.has("/linked"); }, [&] { r.attr_names("/linked"); }}) {
    std::string msg = error_of(f);
    CHECK_THAT(msg, Catch::Contains("x.h5") && Catch::Contains("key '/linked'") &&
                        Catch::Contains("external link") && Catch::Contains("other.h5"));
  }
}

TEST_CASE("h5::Reader refuses external links, external storage and virtual datasets in FIFOs without opening them") {
  ScratchDir dir;
  FifoWatch fifo(dir.file("fifo"));
  write_raw(dir.file("x.h5"), [&](hid_t f) {
    REQUIRE(H5Lcreate_external(fifo.path.c_str(), "/x", f, "/linked", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    hsize_t dims[1] = {4};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_external(dcpl, fifo.path.c_str(), 0, 32) >= 0);
    hid_t d = H5Dcreate2(f, "/stored", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(d >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_virtual(dcpl, space, fifo.path.c_str(), "/x", space) >= 0);
    d = H5Dcreate2(f, "/virtual", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(d >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  h5::Reader r(dir.file("x.h5"));
  CHECK_THAT(error_of([&] { r.read("/linked"); }),
             Catch::Contains("key '/linked'") && Catch::Contains("external link"));
  CHECK_THAT(error_of([&] { r.read("/stored"); }),
             Catch::Contains("key '/stored'") && Catch::Contains("external storage"));
  CHECK_THAT(error_of([&] { r.read("/virtual"); }),
             Catch::Contains("key '/virtual'") && Catch::Contains("virtual dataset"));
  CHECK_FALSE(fifo.stop());
}

TEST_CASE("reading or writing an HDF5 file turns off HDF5's loading of filter plugins") {
  // with loading on, a dataset naming an unknown filter makes HDF5 load a library found
  // in HDF5_PLUGIN_PATH: code a crafted file would choose
  ScratchDir dir;
  write_raw(dir.file("x.h5"));
  REQUIRE(H5PLset_loading_state(H5PL_ALL_PLUGIN) >= 0);
  { h5::Reader r(dir.file("x.h5")); }
  unsigned int state = 1;
  REQUIRE(H5PLget_loading_state(&state) >= 0);
  CHECK(state == 0);
  REQUIRE(H5PLset_loading_state(H5PL_ALL_PLUGIN) >= 0);
  { h5::Writer w(dir.file("y.h5")); }
  REQUIRE(H5PLget_loading_state(&state) >= 0);
  CHECK(state == 0);
}

TEST_CASE("h5::Reader refuses soft links, also as an intermediate group") {
  ScratchDir dir;
  write_raw(dir.file("x.h5"), [&](hid_t f) {
    hid_t g = H5Gcreate2(f, "/g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    REQUIRE(H5Lcreate_hard(f, "/data", f, "/g/x", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    REQUIRE(H5Lcreate_soft("/data", f, "/soft", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    REQUIRE(H5Lcreate_soft("/g", f, "/soft_group", H5P_DEFAULT, H5P_DEFAULT) >= 0);
  });
  h5::Reader r(dir.file("x.h5"));
  REQUIRE(r.read("/g/x").numel() == 4);  // a second hard link is an ordinary name
  CHECK_THAT(error_of([&] { r.read("/soft"); }),
             Catch::Contains("x.h5") && Catch::Contains("key '/soft' is a soft link to '/data'"));
  CHECK_THAT(error_of([&] { r.read("/soft_group/x"); }),
             Catch::Contains("key '/soft_group' is a soft link to '/g'"));
  CHECK_THAT(error_of([&] { r.children("/soft_group"); }), Catch::Contains("soft link"));
}

TEST_CASE("h5::Reader refuses a dataset whose data is stored in another file") {
  ScratchDir dir;
  const std::string secret = dir.file("secret.txt");
  spit(secret, std::string(64, 'S'));
  write_raw(dir.file("x.h5"), [&](hid_t f) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_external(dcpl, secret.c_str(), 0, 32) >= 0);
    hsize_t dims[1] = {4};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t d = H5Dcreate2(f, "/w", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(d >= 0);
    H5Dclose(d);
    H5Sclose(space);
    H5Pclose(dcpl);
  });
  h5::Reader r(dir.file("x.h5"));
  CHECK(r.is_dataset("/w"));
  for (auto& f : std::vector<std::function<void()>>{[&] { r.read("/w"); }, [&] { r.read_u64("/w"); },
                                                    [&] { r.read_strings("/w"); }})
    CHECK_THAT(error_of(f), Catch::Contains("x.h5") && Catch::Contains("key '/w'") &&
                                Catch::Contains("external storage"));
}

TEST_CASE("h5::Reader refuses a virtual dataset") {
  ScratchDir dir;
  write_raw(dir.file("source.h5"));
  write_raw(dir.file("x.h5"), [&](hid_t f) {
    hsize_t dims[1] = {4};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_virtual(dcpl, space, dir.file("source.h5").c_str(), "/data", space) >= 0);
    hid_t d = H5Dcreate2(f, "/v", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(d >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  CHECK_THAT(error_of([&] { h5::Reader(dir.file("x.h5")).read("/v"); }),
             Catch::Contains("x.h5") && Catch::Contains("key '/v'") && Catch::Contains("virtual dataset"));
}

TEST_CASE("a checkpoint whose weight is an external link or external storage is refused, naming the key") {
  ScratchDir dir;
  Model m;
  ResumeTargets t;
  t.model = m.state_dict();
  const Tensor before = m.proj->bias.clone();
  write_raw(dir.file("other.h5"));
  edited_checkpoint(dir.file("link.h5"), [&](hid_t f) {
    REQUIRE(H5Ldelete(f, "/model/proj.bias", H5P_DEFAULT) >= 0);
    REQUIRE(H5Lcreate_external(dir.file("other.h5").c_str(), "/data", f, "/model/proj.bias", H5P_DEFAULT,
                               H5P_DEFAULT) >= 0);
  });
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("link.h5"), t); }),
             Catch::Contains("link.h5") && Catch::Contains("'/model/proj.bias'") && Catch::Contains("external link"));

  const std::string secret = dir.file("secret.txt");
  spit(secret, std::string(64, 'S'));
  edited_checkpoint(dir.file("stored.h5"), [&](hid_t f) {
    REQUIRE(H5Ldelete(f, "/model/proj.bias", H5P_DEFAULT) >= 0);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_external(dcpl, secret.c_str(), 0, 12) >= 0);
    hsize_t dims[1] = {3};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t d = H5Dcreate2(f, "/model/proj.bias", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(d >= 0);
    H5Dclose(d);
    H5Sclose(space);
    H5Pclose(dcpl);
  });
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("stored.h5"), t); }),
             Catch::Contains("stored.h5") && Catch::Contains("'/model/proj.bias'") &&
                 Catch::Contains("external storage"));
  CHECK(equal(m.proj->bias, before));
}

TEST_CASE("read_checkpoint checks the header before reading the rest of the file") {
  ScratchDir dir;
  // sparse files far larger than memory: reading them whole first would fail for lack of it
  const off_t huge = off_t(1) << 40;
  spit(dir.file("text.h5"), "hello, not a checkpoint\n");
  REQUIRE(::truncate(dir.file("text.h5").c_str(), huge) == 0);
  CHECK_THAT(error_of([&] { read_checkpoint(dir.file("text.h5")); }),
             Catch::Contains("text.h5") && Catch::Contains("not an ember checkpoint"));

  Model m;
  save_checkpoint(dir.file("grown.h5"), make_checkpoint(m.state_dict(), nullptr, nullptr, {}, {}));
  const auto size = fs::file_size(dir.file("grown.h5"));
  REQUIRE(::truncate(dir.file("grown.h5").c_str(), huge) == 0);
  CHECK_THAT(error_of([&] { read_checkpoint(dir.file("grown.h5")); }),
             Catch::Contains("grown.h5") && Catch::Contains("longer than written") &&
                 Catch::Contains(std::to_string(size) + " bytes"));
}

TEST_CASE("make_checkpoint and load_checkpoint refuse a null generator, naming it") {
  ScratchDir dir;
  CHECK_THAT(error_of([&] { make_checkpoint({}, nullptr, nullptr, {{"g", nullptr}}, {}); }),
             Catch::Equals("make_checkpoint: generator 'g' is null"));
  Generator g(1);
  save_checkpoint(dir.file("c.h5"), make_checkpoint({}, nullptr, nullptr, {{"g", &g}}, {}));
  ResumeTargets t;
  t.generators = {{"g", nullptr}};
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("c.h5"), t); }), Catch::Contains("generator 'g' is null"));
}

TEST_CASE("CheckpointManager refuses steps its file names cannot hold, and keeps every step they can") {
  ScratchDir dir;
  CheckpointManager mgr(dir.file("run"));
  Checkpoint c;
  for (int64_t step : {int64_t(-5), int64_t(1'000'000'000'000'000'000), INT64_MAX}) {
    c.progress.step = step;
    CHECK_THAT(error_of([&] { mgr.save(c); }),
               Catch::Contains("CheckpointManager::save") && Catch::Contains("step " + std::to_string(step)));
    CHECK_THAT(error_of([&] { mgr.path_for(step); }), Catch::Contains("step " + std::to_string(step)));
  }
  CHECK(mgr.list().empty());
  c.progress.step = 999'999'999'999'999'999;  // the largest, also beyond what a double holds exactly
  std::string path = mgr.save(c);
  REQUIRE(mgr.latest() == path);
  CHECK(read_checkpoint(path).progress.step == 999'999'999'999'999'999);
}

TEST_CASE("strings holding a NUL byte are refused when saving, naming the key") {
  ScratchDir dir;
  Checkpoint c;
  c.config["activation"] = std::string("\xff\0zz", 4);
  CHECK_THAT(error_of([&] { save_checkpoint(dir.file("c.h5"), c); }),
             Catch::Contains("c.h5") && Catch::Contains("attribute 'activation' on '/config'") &&
                 Catch::Contains("NUL byte at offset 1 (of 4 bytes)"));
  c.config.clear();
  c.vocab["src"] = {"a", std::string("\0a", 2)};
  CHECK_THAT(error_of([&] { save_checkpoint(dir.file("c.h5"), c); }),
             Catch::Contains("key '/vocab/src', string 1") && Catch::Contains("NUL byte at offset 0"));
  c.vocab.clear();
  c.config[std::string("a\0b", 3)] = int64_t(1);
  CHECK_THAT(error_of([&] { save_checkpoint(dir.file("c.h5"), c); }),
             Catch::Contains("attribute 'a\\0b' on '/config'") && Catch::Contains("NUL byte"));
  CHECK_FALSE(fs::exists(dir.file("c.h5")));
}

TEST_CASE("undefined tensors are named with the function and the key") {
  ScratchDir dir;
  const Tensor undefined = Tensor::undefined("it was never set");
  CHECK_THAT(error_of([&] { make_checkpoint({{"encoder.w", undefined}}, nullptr, nullptr, {}, {}); }),
             Catch::StartsWith("make_checkpoint: model tensor 'encoder.w' is undefined"));
  Checkpoint c;
  c.model["encoder.w"] = undefined;
  CHECK_THAT(error_of([&] { save_checkpoint(dir.file("c.h5"), c); }),
             Catch::StartsWith("save_checkpoint: model tensor 'encoder.w' is undefined"));
  c.model.clear();
  c.extra["loss"] = undefined;
  CHECK_THAT(error_of([&] { save_checkpoint(dir.file("c.h5"), c); }),
             Catch::StartsWith("save_checkpoint: extra tensor 'loss' is undefined"));
  CHECK_THAT(error_of([&] { h5::Writer(dir.file("x.h5")).write("/x", undefined); }),
             Catch::StartsWith("h5::Writer::write: the tensor for key '/x'") && Catch::Contains("x.h5"));

  Model m;
  save_checkpoint(dir.file("m.h5"), make_checkpoint(m.state_dict(), nullptr, nullptr, {}, {}));
  ResumeTargets t;
  t.model = m.state_dict();
  t.model["proj.bias"] = undefined;
  CHECK_THAT(error_of([&] { load_checkpoint(dir.file("m.h5"), t); }),
             Catch::StartsWith("load_checkpoint: target model tensor 'proj.bias' is undefined"));
}

TEST_CASE("h5::Reader reads uint8 as bool only when it holds 0 and 1, and refuses uint64 values int64 cannot hold") {
  ScratchDir dir;
  const std::string path = dir.file("types.h5");
  auto add = [](hid_t f, const char* name, hid_t file_type, hid_t mem_type, const void* values) {
    hsize_t dims[1] = {3};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t d = H5Dcreate2(f, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0);
    H5Dclose(d);
    H5Sclose(space);
  };
  const uint8_t good[3] = {0, 1, 1}, bad[3] = {0, 2, 1};
  const uint64_t big[3] = {1, uint64_t(1) << 63, 3};
  const int32_t small[3] = {-5, 0, 7};
  write_raw(path, [&](hid_t f) {
    add(f, "/mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, good);
    add(f, "/two", H5T_STD_U8LE, H5T_NATIVE_UINT8, bad);
    add(f, "/big", H5T_STD_U64LE, H5T_NATIVE_UINT64, big);
    add(f, "/small", H5T_STD_I32LE, H5T_NATIVE_INT32, small);
    for (uint64_t v : {UINT64_MAX, uint64_t(7)}) {
      hid_t space = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(f, v == 7 ? "seven" : "huge", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      REQUIRE(H5Awrite(a, H5T_NATIVE_UINT64, &v) >= 0);
      H5Aclose(a);
      H5Sclose(space);
    }
  });
  h5::Reader r(path);
  CHECK(r.read("/mask").to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK_THAT(error_of([&] { (void)r.read("/two"); }),
             StartsWith("h5::read: dataset '/two' in '" + path + "' holds 2 at flat index 1; data read as bool must be 0 or 1"));
  CHECK_THAT(error_of([&] { (void)r.read("/big"); }),
             StartsWith("h5::read: dataset '/big' in '" + path + "' is stored as uint64"));
  CHECK(r.read("/small").to_vector<int64_t>() == std::vector<int64_t>{-5, 0, 7});  // widened exactly
  CHECK_THAT(error_of([&] { (void)r.attr_int("/", "huge"); }),
             StartsWith("h5::attr_int: attribute 'huge' on '/' in '" + path + "' holds 18446744073709551615, past what int64 holds"));
  CHECK(r.attr_int("/", "seven") == 7);
}

TEST_CASE("h5::Reader refuses a small file declaring a huge chunked dataset before allocating it") {
  ScratchDir dir;
  const std::string path = dir.file("sparse.h5");
  write_raw(path, [](hid_t f) {
    hsize_t dims[2] = {hsize_t(1) << 26, 16}, chunk[2] = {1024, 16};
    hid_t space = H5Screate_simple(2, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_deflate(dcpl, 6);
    hid_t d = H5Dcreate2(f, "/huge", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(d >= 0);  // no chunk is ever written
    H5Dclose(d);
    // and one whose first chunk only is written
    d = H5Dcreate2(f, "/sparse", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::vector<float> first(1024 * 16, 1.5f);
    hsize_t start[2] = {0, 0};
    hid_t part = H5Screate_simple(2, chunk, nullptr), file_part = H5Scopy(space);
    H5Sselect_hyperslab(file_part, H5S_SELECT_SET, start, nullptr, chunk, nullptr);
    REQUIRE(H5Dwrite(d, H5T_NATIVE_FLOAT, part, file_part, H5P_DEFAULT, first.data()) >= 0);
    H5Sclose(part);
    H5Sclose(file_part);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  REQUIRE(fs::file_size(path) < 100000);
  h5::Reader r(path);
  CHECK_THAT(error_of([&] { (void)r.read("/huge"); }),
             Catch::Equals("h5::read: dataset '/huge' in '" + path + "' declares 1073741824 elements but was never written (it "
                    "stores none); ember reads only data held in the file itself"));
  CHECK_THAT(error_of([&] { (void)r.read("/sparse"); }),
             StartsWith("h5::read: dataset '/sparse' in '" + path + "' declares 1073741824 elements but stores only "));
  // a dataset that compresses well is read
  const std::string ok = dir.file("zeros.h5");
  write_raw(ok, [](hid_t f) {
    hsize_t dims[1] = {1 << 20}, chunk[1] = {1 << 16};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    H5Pset_deflate(dcpl, 9);
    hid_t d = H5Dcreate2(f, "/zeros", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::vector<double> z(1 << 20, 0.0);
    REQUIRE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, z.data()) >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  CHECK(h5::Reader(ok).read("/zeros").numel() == 1 << 20);
}

TEST_CASE("h5::Writer::write refuses a key without a name and one written before, saying which") {
  ScratchDir dir;
  const std::string path = dir.file("w.h5");
  h5::Writer w(path);
  w.write("/a/x", ones({1}));
  CHECK_THAT(error_of([&] { w.write("/a/x", ones({2})); }),
             Catch::Equals("h5::Writer::write: '/a/x' already exists in '" + path + "'"));
  CHECK_THAT(error_of([&] { w.write("/a/", ones({2})); }),
             Catch::Equals("h5::Writer::write: a dataset needs a name, got '/a/' for '" + path + "'"));
  CHECK_THAT(error_of([&] { w.write("", ones({2})); }), Catch::StartsWith("h5::Writer::write: a dataset needs a name"));
  w.close();
  CHECK(h5::read(path, "/a/x").shape() == Shape{1});
}
