// NumPy's .npy and .npz formats: see npy.h.
#include "io/npy.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/kernels/dispatch.h"

namespace ember::io::npy {

static_assert(std::endian::native == std::endian::little, "the formats are written little-endian, as the host's");

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes

// ------------------------------------------------------------------ .npy
std::string descr_of(DType dt) {
  switch (dt) {
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Int64: return "<i8";
    case DType::Bool: return "|b1";
    case DType::BFloat16: break;  // refused by encode
  }
  return "";
}

// What a descr becomes: the dtype, the stored element's size and kind ('f', 'i', 'u', 'b').
struct Element {
  DType dtype;
  int size;
  char kind;
};

// The header's Python literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct Header {
  std::string descr;
  bool fortran = false;
  Shape shape;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where, const char* op) : s_(text), where_(where), op_(op) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string();
      expect(':');
      if (key == "descr" && !seen_descr) h.descr = string(), seen_descr = true;
      else if (key == "fortran_order" && !seen_order) h.fortran = boolean(), seen_order = true;
      else if (key == "shape" && !seen_shape) h.shape = tuple(), seen_shape = true;
      else bad(cat_str("an unexpected or repeated key '", key, "'"));
      if (!peek('}')) expect(',');
    }
    expect('}');
    space();
    if (i_ != s_.size()) bad("text after its closing '}'");
    if (!seen_descr || !seen_order || !seen_shape) bad("no 'descr', 'fortran_order' or 'shape' key");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(op_, where_, ": the .npy header has ", what, " (at character ", (int64_t)i_, " of ", printable(s_), ")");
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) i_++;
  }
  bool peek(char c) {
    space();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) bad(cat_str("no '", std::string(1, c), "' where one belongs"));
    i_++;
  }
  std::string string() {
    space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("no string where one belongs");
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == std::string::npos) bad("an unterminated string");
    std::string r = s_.substr(i_, end - i_);
    i_ = end + 1;
    return r;
  }
  bool boolean() {
    space();
    if (s_.compare(i_, 4, "True") == 0) return i_ += 4, true;
    if (s_.compare(i_, 5, "False") == 0) return i_ += 5, false;
    bad("no True or False for 'fortran_order'");
  }
  Shape tuple() {
    Shape r;
    expect('(');
    while (!peek(')')) {
      space();
      int64_t v = 0;
      size_t digits = 0;
      for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; i_++, digits++) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) bad("a size past 2^63");
        v = v * 10 + (s_[i_] - '0');
      }
      if (digits == 0) bad("a size that is not a non-negative integer");
      if (i_ < s_.size() && s_[i_] == 'L') i_++;  // Python 2's long
      r.push_back(v);
      if (r.size() > 64) bad("more than 64 dims");
      if (!peek(')')) expect(',');
    }
    expect(')');
    return r;
  }

  const std::string& s_;
  const std::string& where_;
  const char* op_;
  size_t i_ = 0;
};

Element element_of(const std::string& descr, const std::string& where, const char* op) {
  auto refuse = [&](const std::string& why) -> Element {
    fail(op, where, ": dtype ", printable(descr), " ", why);
  };
  if (descr.size() < 3) return refuse("is not one ember reads (float32, float64, integers, bool)");
  const char order = descr[0], kind = descr[1];
  int size = 0;
  for (size_t i = 2; i < descr.size(); i++) {
    if (descr[i] < '0' || descr[i] > '9' || size > 100) return refuse("is not one ember reads");
    size = size * 10 + (descr[i] - '0');
  }
  if (order == '>' && size > 1) return refuse("is big-endian; save it little-endian (a.astype('<f8') in NumPy)");
  if (order != '<' && order != '|' && order != '=' && order != '>') return refuse("has no known byte order");
  if (kind == 'f' && (size == 4 || size == 8)) return {size == 4 ? kFloat32 : kFloat64, size, kind};
  if ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) return {kInt64, size, kind};
  if (kind == 'b' && size == 1) return {kBool, 1, kind};
  return refuse("is not one ember reads (float32, float64, integers of up to 8 bytes as int64, bool)");
}

template <class U>
U load_le(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::vector<uint8_t> encode(const Tensor& t) {
  if (t.dtype() == kBFloat16) fail("npy::encode", "NumPy has no bfloat16 (io::save refuses it first)");
  std::string shape = "(";
  for (int64_t d = 0; d < t.dim(); d++) shape += std::to_string(t.size(d)) + (t.dim() == 1 ? "," : d + 1 < t.dim() ? ", " : "");
  shape += ")";
  std::string header = "{'descr': '" + descr_of(t.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const bool v2 = header.size() + 11 > 65535;
  const size_t preamble = v2 ? 12 : 10;
  header += std::string((64 - (preamble + header.size() + 1) % 64) % 64, ' ') + "\n";
  const Tensor c = t.detach().contiguous();
  const size_t data = (size_t)c.numel() * dtype_size(c.dtype());
  std::vector<uint8_t> out(preamble + header.size() + data);
  std::memcpy(out.data(), kMagic, 6);
  out[6] = v2 ? 2 : 1;
  out[7] = 0;
  if (v2) {
    const uint32_t n = (uint32_t)header.size();
    std::memcpy(out.data() + 8, &n, 4);
  } else {
    const uint16_t n = (uint16_t)header.size();
    std::memcpy(out.data() + 8, &n, 2);
  }
  std::memcpy(out.data() + preamble, header.data(), header.size());
  if (data > 0) std::memcpy(out.data() + preamble + header.size(), c.raw_data(), data);
  return out;
}

Tensor decode(const uint8_t* data, size_t size, const std::string& where, const char* op) {
  if (size < 6 || std::memcmp(data, kMagic, 6) != 0)
    fail(op, where, " is not a .npy file (it does not start with NumPy's magic string)");
  if (size < 10) fail(op, where, " is truncated inside its header");
  const int major = data[6];
  if (major < 1 || major > 3) fail(op, where, ": .npy format version ", major, ".", (int)data[7], " is not one ember reads (1 to 3)");
  const size_t preamble = major == 1 ? 10 : 12;
  if (size < preamble) fail(op, where, " is truncated inside its header");
  const size_t hlen = major == 1 ? load_le<uint16_t>(data + 8) : load_le<uint32_t>(data + 8);
  if (hlen > size - preamble) fail(op, where, " is truncated: its header needs ", hlen, " bytes, ", size - preamble, " follow");
  const Header h = HeaderParser(std::string((const char*)data + preamble, hlen), where, op).parse();
  const Element e = element_of(h.descr, where, op);
  uint64_t count = 1;
  for (int64_t s : h.shape) {
    if (s != 0 && count > (uint64_t(1) << 56) / (uint64_t)s)
      fail(op, where, ": shape ", h.shape, " has more elements than ember holds (2^56)");
    count *= (uint64_t)s;
  }
  const size_t have = size - preamble - hlen;
  if (count * (uint64_t)e.size != have)
    fail(op, where, ": its header declares ", count, " elements of ", e.size, " bytes (shape ", h.shape, ", dtype '",
         h.descr, "'), but ", have, " bytes of data follow");
  const uint8_t* p = data + preamble + hlen;
  Shape stored = h.shape;
  if (h.fortran) std::reverse(stored.begin(), stored.end());  // column-major: the reversed shape, row-major
  Tensor t = empty(stored, e.dtype);
  if (e.kind == 'f' || (e.kind == 'i' && e.size == 8)) {
    if (count > 0) std::memcpy(t.raw_data(), p, have);
  } else {
    dispatch_all(e.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* out = t.data<T>();
      for (uint64_t i = 0; i < count; i++) {
        const uint8_t* q = p + i * e.size;
        int64_t v = 0;
        uint64_t u = 0;
        switch (e.size * (e.kind == 'i' ? 1 : -1)) {
          case 1: v = load_le<int8_t>(q); break;
          case 2: v = load_le<int16_t>(q); break;
          case 4: v = load_le<int32_t>(q); break;
          case -1: v = load_le<uint8_t>(q); break;
          case -2: v = load_le<uint16_t>(q); break;
          case -4: v = load_le<uint32_t>(q); break;
          case -8:
            u = load_le<uint64_t>(q);
            if (u > (uint64_t)std::numeric_limits<int64_t>::max())
              fail(op, where, ": element ", i, " is ", u, ", which int64 cannot hold (uint64 data)");
            v = (int64_t)u;
            break;
        }
        if (e.kind == 'b' && v > 1) fail(op, where, ": element ", i, " of a bool array holds ", v, ", not 0 or 1");
        out[i] = (T)v;
      }
    });
  }
  if (!h.fortran || t.dim() < 2) return t;
  std::vector<int64_t> back(t.dim());
  for (int64_t d = 0; d < t.dim(); d++) back[d] = t.dim() - 1 - d;
  return t.permute(back).contiguous();
}

// ------------------------------------------------------------------ .npz (zip)
namespace {

void put16(std::vector<uint8_t>& b, uint16_t v) { b.insert(b.end(), {uint8_t(v), uint8_t(v >> 8)}); }
void put32(std::vector<uint8_t>& b, uint32_t v) { put16(b, uint16_t(v)), put16(b, uint16_t(v >> 16)); }

constexpr uint32_t kLocal = 0x04034b50, kCentral = 0x02014b50, kEnd = 0x06054b50, kEnd64 = 0x06064b50,
                   kLocator64 = 0x07064b50;
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, the earliest a zip can say

uint32_t crc_of(const uint8_t* p, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes at most 4 GiB a call
    const uInt chunk = (uInt)std::min<size_t>(n, 1u << 30);
    crc = crc32(crc, p, chunk);
    p += chunk, n -= chunk;
  }
  return (uint32_t)crc;
}

// Bounds-checked little-endian reads of the archive: a field past the end is an error
// naming the file, never a read past the buffer.
struct Archive {
  const std::vector<uint8_t>& b;
  const std::string& path;
  const char* op;
  uint64_t u(uint64_t at, int bytes) const {
    if (at > b.size() || (uint64_t)bytes > b.size() - at)
      fail(op, "'", path, "' is not a whole zip archive (a record reaches past its end); an .npz file is one");
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | b[at + i];
    return v;
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail(op, "'", path, "' is not an .npz file ember reads: ", what);
  }
};

}  // namespace

std::vector<uint8_t> zip(const Members& members, const std::string& path, const char* op) {
  std::vector<uint8_t> out, central;
  if (members.size() >= 0xFFFF) fail(op, "'", path, "': ", members.size(), " arrays are more than an .npz holds here (65534); use .h5");
  for (const auto& member : members) {
    const std::string& name = member.first;  // (named, not bound: lambdas below capture them)
    const std::vector<uint8_t>& data = member.second;
    if (name.size() > 0xFFFF)
      fail(op, "'", path, "': the name ", printable(name), " is ", name.size(), " bytes, more than a zip member's name holds (65535)");
    if (out.size() + data.size() + name.size() + 30 >= 0xFFFFFFFFu)
      fail(op, "'", path, "': the arrays pass 4 GiB, more than ember's .npz writer holds; use .h5");
    const uint32_t crc = crc_of(data.data(), data.size());
    const uint32_t offset = (uint32_t)out.size();
    auto header = [&](std::vector<uint8_t>& b, bool is_central) {
      put32(b, is_central ? kCentral : kLocal);
      if (is_central) put16(b, 20);  // made by: zip 2.0
      put16(b, 20);                  // needed: zip 2.0
      put16(b, 0x0800);              // names are UTF-8
      put16(b, 0);                   // stored
      put16(b, 0), put16(b, kDosDate);
      put32(b, crc), put32(b, (uint32_t)data.size()), put32(b, (uint32_t)data.size());
      put16(b, (uint16_t)name.size()), put16(b, 0);
      if (is_central) put16(b, 0), put16(b, 0), put16(b, 0), put32(b, 0), put32(b, offset);
      b.insert(b.end(), name.begin(), name.end());
    };
    header(out, false);
    out.insert(out.end(), data.begin(), data.end());
    header(central, true);
  }
  const uint32_t central_at = (uint32_t)out.size();
  out.insert(out.end(), central.begin(), central.end());
  put32(out, kEnd), put16(out, 0), put16(out, 0);
  put16(out, (uint16_t)members.size()), put16(out, (uint16_t)members.size());
  put32(out, (uint32_t)central.size()), put32(out, central_at), put16(out, 0);
  return out;
}

Members unzip(const std::vector<uint8_t>& file, const std::string& path, const char* op) {
  const Archive a{file, path, op};
  // the end record: the last 22 bytes, or further back past a comment of up to 64 KiB
  if (file.size() < 22) a.bad("it is too short for a zip archive");
  uint64_t end = file.size() - 22;
  const uint64_t stop = end > 0xFFFF ? end - 0xFFFF : 0;
  while (a.u(end, 4) != kEnd) {
    if (end == stop) a.bad("it has no zip end record");
    end--;
  }
  uint64_t entries = a.u(end + 10, 2), central_size = a.u(end + 12, 4), central_at = a.u(end + 16, 4);
  if (entries == 0xFFFF || central_size == 0xFFFFFFFF || central_at == 0xFFFFFFFF) {  // zip64
    if (end < 20 || a.u(end - 20, 4) != kLocator64) a.bad("its zip64 end record is missing");
    const uint64_t end64 = a.u(end - 12, 8);
    if (a.u(end64, 4) != kEnd64) a.bad("its zip64 end record is damaged");
    entries = a.u(end64 + 32, 8), central_size = a.u(end64 + 40, 8), central_at = a.u(end64 + 48, 8);
  }
  if (central_at > end || central_size > end - central_at || entries > central_size / 46)
    a.bad("its central directory does not fit in the file");
  Members members;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // each member's [local header, end of data)
  uint64_t total = 0;
  uint64_t at = central_at;
  for (uint64_t k = 0; k < entries; k++) {
    if (a.u(at, 4) != kCentral) a.bad(cat_str("central directory entry ", k, " is damaged"));
    const uint64_t flags = a.u(at + 8, 2), method = a.u(at + 10, 2), crc = a.u(at + 16, 4);
    uint64_t packed = a.u(at + 20, 4), size = a.u(at + 24, 4), local = a.u(at + 42, 4);
    const uint64_t name_len = a.u(at + 28, 2), extra_len = a.u(at + 30, 2), comment_len = a.u(at + 32, 2);
    if (at + 46 + name_len + extra_len + comment_len > central_at + central_size)
      a.bad(cat_str("central directory entry ", k, " reaches past the directory"));
    const std::string name((const char*)file.data() + at + 46, name_len);
    // zip64: the fields saturated above are in the extra block, in this order
    for (uint64_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = a.u(x, 2), len = a.u(x + 2, 2);
      if (id == 0x0001) {
        uint64_t f = x + 4;
        if (size == 0xFFFFFFFF) size = a.u(f, 8), f += 8;
        if (packed == 0xFFFFFFFF) packed = a.u(f, 8), f += 8;
        if (local == 0xFFFFFFFF) local = a.u(f, 8);
      }
      x += 4 + len;
    }
    const std::string what = cat_str("member '", printable(name), "'");
    if (flags & 1) a.bad(what + " is encrypted");
    if (method != 0 && method != 8) a.bad(cat_str(what, " is compressed with method ", method, " (ember reads stored and deflated)"));
    if (a.u(local, 4) != kLocal) a.bad(what + ": its local header is missing");
    const uint64_t local_name_len = a.u(local + 26, 2);
    const uint64_t data_at = local + 30 + local_name_len + a.u(local + 28, 2);
    if (data_at > file.size() || packed > file.size() - data_at) a.bad(what + " reaches past the end of the file");
    if (local_name_len != name_len || std::memcmp(file.data() + local + 30, name.data(), name_len) != 0)
      a.bad(what + "'s local header names another member");
    spans.emplace_back(local, data_at + packed);
    // members sharing bytes (one stream claimed by many names) would multiply what is read
    total += size;
    if (total > 1100 * (uint64_t)file.size() + (1u << 20))
      a.bad(cat_str("its members claim ", total, " bytes in all from a file of ", file.size()));
    // no deflate stream expands more than about 1032:1: a larger claim is a zip bomb
    if (method == 0 ? size != packed : size > 1100 * packed + (1u << 20))
      a.bad(cat_str(what, " claims ", size, " bytes from ", packed, " stored"));
    std::vector<uint8_t> bytes(size);
    if (method == 0) {
      if (size > 0) std::memcpy(bytes.data(), file.data() + data_at, size);
    } else {
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) a.bad("zlib cannot start");
      z.next_in = const_cast<Bytef*>(file.data() + data_at);
      z.avail_in = (uInt)std::min<uint64_t>(packed, std::numeric_limits<uInt>::max());
      z.next_out = bytes.data();
      z.avail_out = (uInt)std::min<uint64_t>(size, std::numeric_limits<uInt>::max());
      const int rc = inflate(&z, Z_FINISH);
      const uint64_t got = z.total_out;
      inflateEnd(&z);
      if (rc != Z_STREAM_END || got != size) a.bad(what + "'s deflated data is damaged");
    }
    if (crc_of(bytes.data(), bytes.size()) != crc) a.bad(what + " fails its CRC-32 check");
    for (const auto& [seen, unused] : members)
      if (seen == name) a.bad(what + " appears twice");
    members.emplace_back(name, std::move(bytes));
    at += 46 + name_len + extra_len + comment_len;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); i++)
    if (spans[i].first < spans[i - 1].second) a.bad("two of its members share bytes");
  return members;
}

}  // namespace ember::io::npy
