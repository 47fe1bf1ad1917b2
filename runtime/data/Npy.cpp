//===- Npy.cpp - samples from .npy arrays ---------------------------------===//
//
// One .npy file per field (NpyFieldPath), memory-mapped. Each holds a
// C-ordered little-endian array of shape [n, <the field's shape>...]: float32
// for float fields, int32 or int64 for integer fields. Every file must have
// the same n, the data set's size. Format: numpy's NEP 1 (versions 1.0, 2.0
// and 3.0 of the header).
//
//===----------------------------------------------------------------------===//

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/core/Status.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/MappedFile.h"

namespace md::data {
namespace {

absl::Status bad(const std::string &path, const std::string &why) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": not a usable .npy file: ", why));
}

/// The value of 'key' in the header dict, up to the next top-level comma.
bool headerValue(absl::string_view header, absl::string_view key,
                 absl::string_view *value) {
  size_t at = header.find(absl::StrCat("'", key, "'"));
  if (at == absl::string_view::npos)
    return false;
  size_t colon = header.find(':', at);
  if (colon == absl::string_view::npos)
    return false;
  absl::string_view rest = header.substr(colon + 1);
  rest = absl::StripLeadingAsciiWhitespace(rest);
  size_t end = 0;
  if (!rest.empty() && rest[0] == '(') {
    end = rest.find(')');
    if (end == absl::string_view::npos)
      return false;
    ++end;
  } else {
    end = rest.find_first_of(",}");
    if (end == absl::string_view::npos)
      return false;
  }
  *value = absl::StripAsciiWhitespace(rest.substr(0, end));
  return true;
}

/// A data set's array: float32, int32 or int64 (what its fields stage).
absl::StatusOr<NpyArray> openNpy(const std::string &path) {
  MD_ASSIGN_OR_RETURN(NpyArray a, OpenNpyArray(path));
  if (a.descr != "<f4" && a.descr != "<i4" && a.descr != "<i8")
    return bad(path, absl::StrCat("dtype '", a.descr,
                                  "' is not one of float32 '<f4', int32 '<i4', "
                                  "int64 '<i8'"));
  return a;
}

} // namespace

absl::StatusOr<NpyArray> OpenNpyArray(const std::string &path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok())
    return file.status();
  NpyArray a;
  a.file = std::move(*file);
  const uint8_t *p = a.file->data();
  int64_t size = a.file->size();
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0)
    return bad(path, "no \\x93NUMPY magic");
  int major = p[6];
  int64_t headerLen = 0, start = 0;
  if (major == 1) {
    headerLen = p[8] | (p[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return bad(path, "truncated header");
    headerLen = int64_t(p[8]) | (int64_t(p[9]) << 8) | (int64_t(p[10]) << 16) |
                (int64_t(p[11]) << 24);
    start = 12;
  } else {
    return bad(path,
               absl::StrFormat("format version %d is not 1, 2 or 3", major));
  }
  if (headerLen > size - start)
    return bad(path, "truncated header");
  absl::string_view header(reinterpret_cast<const char *>(p + start),
                           static_cast<size_t>(headerLen));
  absl::string_view descr, fortran, shape;
  if (!headerValue(header, "descr", &descr) ||
      !headerValue(header, "fortran_order", &fortran) ||
      !headerValue(header, "shape", &shape))
    return bad(path, "header lacks descr, fortran_order or shape");
  if (fortran != "False")
    return bad(path,
               "Fortran-ordered arrays are not supported (save it C-ordered)");
  descr = absl::StripPrefix(absl::StripSuffix(descr, "'"), "'");
  if (descr == "<f4" || descr == "<i4" || descr == "<u4")
    a.itemSize = 4;
  else if (descr == "<i8" || descr == "<u8")
    a.itemSize = 8;
  else if (descr == "<u2" || descr == "<i2")
    a.itemSize = 2;
  else
    return bad(path, absl::StrCat("dtype '", descr,
                                  "' is not one of float32 '<f4', int16 "
                                  "'<i2', int32 '<i4', int64 '<i8', uint16 "
                                  "'<u2', uint32 '<u4', uint64 '<u8'"));
  a.descr = std::string(descr);
  shape = absl::StripPrefix(absl::StripSuffix(shape, ")"), "(");
  for (absl::string_view dim :
       absl::StrSplit(shape, ',', absl::SkipWhitespace())) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(dim), &d) || d < 0)
      return bad(path, absl::StrCat("bad shape (", shape, ")"));
    a.shape.push_back(d);
  }
  if (a.shape.empty())
    return bad(path, "a 0-d array has no samples");
  int64_t elements = 1;
  for (int64_t d : a.shape)
    if (__builtin_mul_overflow(elements, d, &elements))
      return bad(path, "shape overflows");
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, a.itemSize, &bytes) ||
      bytes > size - start - headerLen)
    return bad(path,
               absl::StrFormat("holds %d bytes of data, its shape needs %d",
                               size - start - headerLen, bytes));
  a.data = p + start + headerLen;
  return a;
}

namespace {

class Npy final : public Dataset {
public:
  Npy(std::string path, std::vector<Field> fields, std::vector<NpyArray> arrays)
      : Dataset(std::move(fields)), path_(std::move(path)),
        arrays_(std::move(arrays)) {}

  int64_t size() const override { return arrays_[0].shape[0]; }
  std::string describe() const override {
    return absl::StrFormat("npy %s (%d samples)", path_, size());
  }

  absl::Status read(int64_t, absl::Span<const int64_t> indices,
                    absl::Span<void *const> out) override {
    for (size_t k = 0; k < fields_.size(); ++k) {
      const Field &f = fields_[k];
      const NpyArray &a = arrays_[k];
      int64_t n = f.numel();
      for (size_t s = 0; s < indices.size(); ++s) {
        const uint8_t *src = a.data + indices[s] * n * a.itemSize;
        uint8_t *dst =
            static_cast<uint8_t *>(out[k]) +
            static_cast<int64_t>(s) * n * runtime::dtypeSize(f.dtype);
        if ((f.dtype == runtime::DType::f32 && a.descr == "<f4") ||
            (f.dtype == runtime::DType::i32 && a.descr == "<i4") ||
            (f.dtype == runtime::DType::i64 && a.descr == "<i8")) {
          std::memcpy(dst, src, static_cast<size_t>(n * a.itemSize));
          continue;
        }
        for (int64_t i = 0; i < n; ++i) {
          int64_t v = 0;
          if (a.descr == "<i4") {
            int32_t x;
            std::memcpy(&x, src + 4 * i, 4);
            v = x;
          } else {
            std::memcpy(&v, src + 8 * i, 8);
          }
          if (f.dtype == runtime::DType::i32) {
            if (v < INT32_MIN || v > INT32_MAX)
              return absl::OutOfRangeError(absl::StrFormat(
                  "%s: value %d of sample %d does not fit in i32",
                  a.file->path(), v, indices[s]));
            int32_t x = static_cast<int32_t>(v);
            std::memcpy(dst + 4 * i, &x, 4);
          } else {
            std::memcpy(dst + 8 * i, &v, 8);
          }
        }
      }
    }
    return absl::OkStatus();
  }

private:
  std::string path_;
  std::vector<NpyArray> arrays_;
};

} // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenNpy(const std::string &path,
                                                 std::vector<Field> fields) {
  if (fields.empty())
    return absl::InvalidArgumentError("npy data: the batch has no tensors");
  std::vector<NpyArray> arrays;
  for (size_t k = 0; k < fields.size(); ++k) {
    std::string file = NpyFieldPath(path, k, fields.size());
    absl::StatusOr<NpyArray> a = openNpy(file);
    if (!a.ok())
      return a.status();
    const Field &f = fields[k];
    bool isFloat = f.dtype == runtime::DType::f32;
    if (isFloat != (a->descr == "<f4"))
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: holds %s, but input '%s' is %s", file,
          a->descr == "<f4" ? "float32" : "integers", f.name,
          isFloat ? "a float tensor (save it as float32)"
                  : "an integer tensor (save it as int32 or int64)"));
    std::vector<int64_t> sample(a->shape.begin() + 1, a->shape.end());
    if (sample != f.shape)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: shape (%s) does not fit input '%s': expected (n, %s)", file,
          absl::StrJoin(a->shape, ", "), f.name, absl::StrJoin(f.shape, ", ")));
    if (!arrays.empty() && a->shape[0] != arrays[0].shape[0])
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: holds %d samples, but %s holds %d", file, a->shape[0],
          NpyFieldPath(path, 0, fields.size()), arrays[0].shape[0]));
    arrays.push_back(std::move(*a));
  }
  if (arrays[0].shape[0] == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        NpyFieldPath(path, 0, fields.size()), ": holds no samples"));
  return std::unique_ptr<Dataset>(
      new Npy(path, std::move(fields), std::move(arrays)));
}

} // namespace md::data
