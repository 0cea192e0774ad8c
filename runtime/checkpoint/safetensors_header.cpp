// safetensors_header.cpp - build and validate the JSON header of a safetensors file (see
// safetensors_header.h). Validation order: JSON syntax and duplicate keys, then each entry's fields, then the
// offsets as a whole (sorted, contiguous from 0, covering the data section). The first problem found is the
// one reported.
#include "runtime/checkpoint/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace ddp::checkpoint {
namespace {

using json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

// "safetensors file 'x': <problem>" - every read error starts this way.
#define DDP_BAD_FILE(...) DDP_FAIL("safetensors file '", source, "': ", __VA_ARGS__)

constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8};

// numel x element size, or false when it does not fit in 64 bits. An empty shape is a scalar (1 element).
bool byte_size_of(const std::vector<int64_t>& shape, DType dtype, uint64_t* out) {
  for (int64_t d : shape) {
    if (d == 0) {
      *out = 0;
      return true;
    }
  }
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// At most this many characters of file content (a name, a JSON value) are quoted in an error message, so
// a hostile header cannot make the message itself huge.
constexpr size_t kMaxQuoted = 80;

// `text`, cut to kMaxQuoted characters with a note of the full length when longer.
std::string excerpt(std::string_view text) {
  if (text.size() <= kMaxQuoted) return std::string(text);
  return std::string(text.substr(0, kMaxQuoted)) + "... (" + std::to_string(text.size()) + " characters)";
}

// A JSON value as text for an error message, bounded like excerpt(). The header's nesting depth was checked
// before parsing, so dump() cannot recurse deeply; a huge array is still cut.
std::string excerpt_json(const json& value) {
  if (value.is_array() && value.size() > kMaxQuoted) return "an array of " + std::to_string(value.size()) + " values";
  if (value.is_object() && value.size() > kMaxQuoted) return "an object of " + std::to_string(value.size()) + " keys";
  return excerpt(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

// nlohmann-json's parse error with the token it quotes ("last read: '...'") cut like excerpt().
std::string parse_error_text(std::string_view what) {
  constexpr std::string_view kToken = "last read: '";
  size_t begin = what.find(kToken);
  if (begin == std::string_view::npos) return std::string(what.substr(0, 4 * kMaxQuoted));
  begin += kToken.size();
  size_t end = what.find("'; ", begin);
  if (end == std::string_view::npos) end = what.size();
  return std::string(what.substr(0, begin)) + excerpt(what.substr(begin, end - begin)) +
         std::string(what.substr(end, 2 * kMaxQuoted));
}

// Rejects a header nested deeper than a safetensors header can be before nlohmann-json parses it: its
// parser and dump() recurse once per level, so a 100,000-deep array would overflow the stack.
void check_nesting(std::string_view text, const std::string& source) {
  size_t at = 0;
  if (json_nesting_depth(text, kMaxHeaderDepth, &at) > kMaxHeaderDepth)
    DDP_BAD_FILE("the header nests deeper than ", kMaxHeaderDepth, " levels at byte ", at,
                 " (a safetensors header is an object of tensor entries whose shapes are flat arrays)");
}

// A SAX pass over JSON that records the first key appearing twice in one object. It only tracks keys (one
// set per open object), so it is O(n log n). (nlohmann's parse callbacks would do this in the same parse,
// but its callback parser scans the whole parent object each time a child object closes: quadratic in the
// number of tensors, 20 s for 40,000.)
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  std::string duplicate;  // empty when none

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_objects_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (!open_objects_.empty() && !open_objects_.back().insert(key).second) {
      duplicate = excerpt(key);
      return false;  // the first one is reported: stop
    }
    return true;
  }
  bool end_object() override {
    if (!open_objects_.empty()) open_objects_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  std::vector<std::set<std::string>> open_objects_;
};

// Parses JSON and reports the first key that appears twice in one object (nlohmann keeps the last one
// silently, which would let a file say two different things about one tensor).
json parse_rejecting_duplicate_keys(std::string_view text, const std::string& source) {
  json header;
  try {
    header = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    DDP_BAD_FILE("the header is not valid JSON: ", parse_error_text(e.what()));
  }
  DuplicateKeyFinder finder;
  json::sax_parse(text.begin(), text.end(), &finder);
  if (!finder.duplicate.empty()) DDP_BAD_FILE("the header names '", finder.duplicate, "' twice");
  return header;
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& source) {
  if (!value.is_object())
    DDP_BAD_FILE("\"__metadata__\" must be an object of strings, got ", value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      DDP_BAD_FILE("metadata value of '", excerpt(key), "' must be a string, got ", v.type_name(), " (", excerpt_json(v),
                   ")");
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

uint64_t parse_offset(const json& v, const std::string& tensor, const std::string& source) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) DDP_BAD_FILE("tensor '", tensor, "' has a negative data offset ", excerpt_json(v));
  DDP_BAD_FILE("tensor '", tensor, "' has a data offset that is not an integer: ", excerpt_json(v));
}

HeaderEntry parse_entry(const std::string& key, const json& value, uint64_t data_bytes,
                        const std::string& source) {
  const std::string name = excerpt(key);  // as shown in messages
  if (!value.is_object())
    DDP_BAD_FILE("entry '", name, "' must be an object with dtype, shape and data_offsets, got ",
                 value.type_name());
  for (const auto& [field, v] : value.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      DDP_BAD_FILE("tensor '", name, "' has an unknown field '", excerpt(field),
                   "' (expected only dtype, shape and data_offsets)");
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) DDP_BAD_FILE("tensor '", name, "' has no \"", field, "\" field");
  }
  HeaderEntry e;
  e.name = key;

  const json& dtype = value["dtype"];
  if (!dtype.is_string())
    DDP_BAD_FILE("tensor '", name, "' has a dtype that is not a string: ", excerpt_json(dtype));
  if (!parse_safetensors_dtype(dtype.get_ref<const std::string&>(), &e.dtype))
    DDP_BAD_FILE("tensor '", name, "' has dtype ", excerpt_json(dtype),
                 ", which ddp.cpp does not support (supported: F32, F64, BF16, I32, I64, U8)");

  const json& shape = value["shape"];
  if (!shape.is_array()) DDP_BAD_FILE("tensor '", name, "' has a shape that is not an array: ", excerpt_json(shape));
  for (const json& d : shape) {
    if (d.is_number_unsigned()) {
      if (d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        DDP_BAD_FILE("tensor '", name, "' has a dimension too large for int64: ", excerpt_json(d));
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    } else if (d.is_number_integer()) {
      DDP_BAD_FILE("tensor '", name, "' has a negative dimension ", excerpt_json(d), " in shape ", excerpt_json(shape));
    } else {
      DDP_BAD_FILE("tensor '", name, "' has a dimension that is not an integer: ", excerpt_json(d));
    }
  }

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    DDP_BAD_FILE("tensor '", name, "' needs data_offsets [begin, end], got ", excerpt_json(offsets));
  e.begin = parse_offset(offsets[0], name, source);
  e.end = parse_offset(offsets[1], name, source);
  if (e.begin > e.end)
    DDP_BAD_FILE("tensor '", name, "' has data_offsets [", e.begin, ", ", e.end, "] with begin after end");
  if (e.end > data_bytes)
    DDP_BAD_FILE("tensor '", name, "' has data_offsets [", e.begin, ", ", e.end,
                 "] past the end of the data section (", data_bytes, " bytes): file truncated?");

  uint64_t expected = 0;
  if (!byte_size_of(e.shape, e.dtype, &expected))
    DDP_BAD_FILE("tensor '", name, "' has shape ", shape_text(e.shape), " whose byte size overflows 64 bits");
  if (expected != e.end - e.begin)
    DDP_BAD_FILE("tensor '", name, "' of dtype ", safetensors_dtype_code(e.dtype), " and shape ",
                 shape_text(e.shape), " needs ", expected, " bytes but its data_offsets [", e.begin, ", ",
                 e.end, "] span ", e.end - e.begin);
  return e;
}

// Sorted by offset, the tensors must tile [0, data_bytes) exactly: no overlap, no gap, nothing left over.
void check_tiling(const std::vector<HeaderEntry>& sorted, uint64_t data_bytes, const std::string& source) {
  uint64_t covered = 0;
  const HeaderEntry* previous = nullptr;
  for (const HeaderEntry& e : sorted) {
    if (e.begin < covered)
      DDP_BAD_FILE("tensor '", excerpt(e.name), "' at [", e.begin, ", ", e.end, ") overlaps tensor '",
                   excerpt(previous->name),
                   "' at [", previous->begin, ", ", previous->end, ")");
    if (e.begin > covered)
      DDP_BAD_FILE("bytes [", covered, ", ", e.begin,
                   ") of the data section belong to no tensor (gap before '", excerpt(e.name), "')");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_bytes)
    DDP_BAD_FILE("the data section has ", data_bytes, " bytes but the tensors cover only ", covered,
                 " (trailing bytes after the last tensor)");
}

}  // namespace

std::string message_excerpt(std::string_view text) { return excerpt(text); }

int json_nesting_depth(std::string_view text, int limit, size_t* where) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (depth > limit) {
        if (where) *where = i;
        return depth;
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

std::string_view safetensors_dtype_code(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
  }
  return "?";
}

bool parse_safetensors_dtype(std::string_view code, DType* out) {
  for (DType t : kAllDTypes) {
    if (safetensors_dtype_code(t) == code) {
      *out = t;
      return true;
    }
  }
  return false;
}

int64_t NamedBuffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const NamedBuffer* SafetensorsContent::find(std::string_view name) const {
  for (const NamedBuffer& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

ParsedHeader parse_header(std::string_view json_text, uint64_t data_bytes, const std::string& source) {
  size_t first = json_text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || json_text[first] != '{')
    DDP_BAD_FILE("the header does not start with '{' (not a safetensors file, or a corrupt header length)");
  // nlohmann stops at a NUL as if the input ended there; JSON never contains a raw NUL, so reject it here
  // rather than silently ignore whatever follows it.
  size_t nul = json_text.find('\0');
  if (nul != std::string_view::npos)
    DDP_BAD_FILE("the header is not valid JSON: it contains a NUL byte at offset ", nul,
                 " (headers are padded with spaces, not NULs)");
  check_nesting(json_text, source);
  json header = parse_rejecting_duplicate_keys(json_text, source);
  if (!header.is_object()) DDP_BAD_FILE("the header must be a JSON object, got ", header.type_name());

  ParsedHeader parsed;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      parsed.metadata = parse_metadata(value, source);
    else
      parsed.entries.push_back(parse_entry(key, value, data_bytes, source));
  }
  std::sort(parsed.entries.begin(), parsed.entries.end(), [](const HeaderEntry& a, const HeaderEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(parsed.entries, data_bytes, source);
  return parsed;
}

uint64_t checked_tensor_bytes(const TensorView& t) {
  DDP_CHECK(t.name != kMetadataKey,
            "cannot save a tensor named \"__metadata__\": the name is reserved by the "
            "safetensors format for metadata; rename the tensor");
  for (int64_t d : t.shape)
    DDP_CHECK(d >= 0, "cannot save tensor '", t.name, "': negative dimension ", d, " in shape ",
              shape_text(t.shape));
  uint64_t expected = 0;
  DDP_CHECK(byte_size_of(t.shape, t.dtype, &expected), "cannot save tensor '", t.name, "': shape ",
            shape_text(t.shape), " overflows 64 bits");
  DDP_CHECK(expected == t.nbytes, "cannot save tensor '", t.name, "': dtype ",
            safetensors_dtype_code(t.dtype), " and shape ", shape_text(t.shape), " need ", expected,
            " bytes but the view has ", t.nbytes);
  DDP_CHECK(t.data != nullptr || t.nbytes == 0, "cannot save tensor '", t.name, "': data is null");
  return expected;
}

std::string encode_header(const std::vector<const TensorView*>& order,
                          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const TensorView* t : order) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(safetensors_dtype_code(t->dtype));
    entry["shape"] = t->shape;
    entry["data_offsets"] = {offset, offset + t->nbytes};
    header[t->name] = std::move(entry);
    offset += t->nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    DDP_FAIL("cannot save: a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace ddp::checkpoint
